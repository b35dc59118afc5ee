package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/benchkit"
	"github.com/opledger/opledger/internal/bus"
)

// The floor of a path is what its hops cost on this machine with nothing
// of opledger's in them: the same arrivals, published by a client that
// waits for JetStream's acknowledgement, taken by durable pull consumers
// (bus.Consume, as the services take theirs), each stage's statements run
// on a pool against the same cluster, each message handed to a relay that
// publishes it (bus.PublishBatch, as the outbox relays do), and the answer
// read through an ordered consumer, as the client reads results. A new
// intent's path is three hops (intent, command, result) and three commits
// (the intent persisted, the claim, the outcome) around the vendor call; a
// repeat's answer is two hops around one statement. opledger's figure
// minus the floor is what its own code adds; the floor is what the design
// costs here.

// floorStep is one thing a stage of the floor does.
type floorStep int

const (
	floorCommit floorStep = iota // a single-row INSERT, committed (fsync as configured)
	floorRead                    // a single-row SELECT by primary key
	floorVendor                  // the vendor's capture, as the direct call makes it
)

// floorNewPath and floorRepeatPath are the stages of a new intent's path
// and of a repeat's answer.
var (
	floorNewPath    = [][]floorStep{{floorCommit}, {floorCommit, floorVendor, floorCommit}}
	floorRepeatPath = [][]floorStep{{floorRead}}
)

// floorReport is one open-loop run through a floor path.
type floorReport struct {
	Hops    int  `json:"jetstream_hops"`
	Commits int  `json:"commits"`
	Reads   int  `json:"reads"`
	Vendor  bool `json:"vendor_call"`
	// E2E is from each arrival's due time to its answer at the client.
	E2E benchkit.Dist `json:"e2e"`
	// OverheadP50 and OverheadP99 are E2E's quantiles minus the direct
	// vendor call's of the same run (paths with a vendor call).
	OverheadP50 float64 `json:"overhead_p50_ms,omitempty"`
	OverheadP99 float64 `json:"overhead_p99_ms,omitempty"`
	Lost        int     `json:"lost"`
	MaxLateMs   float64 `json:"max_late_ms"`
}

func (f *floorReport) what() string {
	var parts []string
	parts = append(parts, fmt.Sprintf("%d JetStream hops", f.Hops))
	if f.Commits > 0 {
		parts = append(parts, fmt.Sprintf("%d single-row commits", f.Commits))
	}
	if f.Reads > 0 {
		parts = append(parts, fmt.Sprintf("%d single-row read", f.Reads))
	}
	if f.Vendor {
		parts = append(parts, "the vendor call")
	}
	return strings.Join(parts, ", ")
}

func (f *floorReport) print(w io.Writer) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "  floor of this path here (same arrivals through %s; no ledger): p50 %s p99 %s", f.what(), msStr(f.E2E.P50), msStr(f.E2E.P99))
	if f.Vendor {
		fmt.Fprintf(w, "; over the direct call p50 %s p99 %s", msStr(f.OverheadP50), msStr(f.OverheadP99))
	}
	if f.Lost > 0 {
		fmt.Fprintf(w, " (%d without an answer)", f.Lost)
	}
	fmt.Fprintln(w)
}

// floor runs the arrivals of sched through path's stages and returns what
// they took. tag names the run's streams, consumers and table apart from
// any other floor run.
func (b *bench) floor(ctx context.Context, sched []time.Duration, tag string, path [][]floorStep) (*floorReport, error) {
	rep := &floorReport{Hops: len(path) + 1}
	for _, st := range path {
		for _, s := range st {
			switch s {
			case floorCommit:
				rep.Commits++
			case floorRead:
				rep.Reads++
			case floorVendor:
				rep.Vendor = true
			}
		}
	}
	fl, err := b.startFloor(ctx, tag, path)
	if err != nil {
		return nil, err
	}
	defer fl.close()

	last := time.Duration(0)
	if len(sched) > 0 {
		last = sched[len(sched)-1]
	}
	lctx, cancel := context.WithTimeout(ctx, last+b.cfg.Drain)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var pubErr error
	maxLate, err := benchkit.OpenLoop(lctx, sched, func(i int, due time.Time) {
		id := strconv.Itoa(i)
		ch := fl.answers.expect(id)
		m := nats.NewMsg(fl.subject(0))
		m.Data = []byte(id)
		if _, err := fl.client.PublishMsg(lctx, m); err != nil {
			fl.answers.forget(id)
			mu.Lock()
			pubErr = cmpErr(pubErr, err)
			mu.Unlock()
			return
		}
		select {
		case ans := <-ch:
			mu.Lock()
			lat = append(lat, ans.at.Sub(due))
			mu.Unlock()
		case <-lctx.Done():
			fl.answers.forget(id)
			mu.Lock()
			rep.Lost++
			mu.Unlock()
		}
	})
	if err := errors.Join(pubErr, fl.err()); err != nil {
		return nil, fmt.Errorf("bench: floor: %w", err)
	}
	if err != nil && lctx.Err() == nil {
		return nil, err
	}
	rep.E2E, rep.MaxLateMs = benchkit.Summarize(lat), msf(maxLate)
	return rep, nil
}

// floorRun is a floor pipeline's streams, consumers, relays and client.
type floorRun struct {
	b      *bench
	prefix string // subjects
	work   string // the stages' stream (work queue)
	answer string // the answers' stream
	table  string
	pool   *pgxpool.Pool
	bus    *bus.Bus
	js     jetstream.JetStream // the services' side, for the streams
	nc     *nats.Conn          // the client's connection
	client jetstream.JetStream
	stops  []func()
	hand   chan bus.Message
	relays sync.WaitGroup
	reader jetstream.MessagesContext
	// answers are the arrivals waiting, by id, as the latency runs wait.
	answers *answers

	mu     sync.Mutex
	failed error
}

func (f *floorRun) subject(stage int) string { return f.prefix + ".s." + strconv.Itoa(stage) }
func (f *floorRun) answerSubject() string    { return f.prefix + ".answer" }

func (f *floorRun) fail(err error) {
	f.mu.Lock()
	f.failed = cmpErr(f.failed, err)
	f.mu.Unlock()
}

func (f *floorRun) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// startFloor creates the floor's table, streams and consumers, and starts
// its relays and the client's reader.
func (b *bench) startFloor(ctx context.Context, tag string, path [][]floorStep) (_ *floorRun, err error) {
	name := strings.ToUpper("OPLEDGER_BENCH_FLOOR_" + b.run + "_" + tag)
	f := &floorRun{b: b, prefix: "opledger_bench_floor." + b.run + "." + tag, work: name, answer: name + "_ANSWERS",
		table: benchSchema + ".floor_" + b.run + "_" + tag, hand: make(chan bus.Message, 256), answers: newAnswers()}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	if f.pool, err = pgxpool.New(ctx, b.d.Infra.DatabaseURL); err != nil {
		return nil, err
	}
	if err = createScratchTable(ctx, f.pool, f.table); err != nil {
		return nil, err
	}
	if _, err = f.pool.Exec(ctx, benchTag+`INSERT INTO `+f.table+` (v) VALUES ('read')`); err != nil {
		return nil, err
	}
	if f.bus, err = bus.Connect(ctx, b.d.Infra.NATSURL, "bench-floor", zerolog.Nop()); err != nil {
		return nil, err
	}
	if f.js, err = jetstream.New(f.bus.Conn()); err != nil {
		return nil, err
	}
	storage := jetstream.FileStorage
	if b.rep.Settings.MemoryStreams {
		storage = jetstream.MemoryStorage
	}
	if _, err = f.js.CreateStream(ctx, jetstream.StreamConfig{Name: f.work, Subjects: []string{f.prefix + ".s.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: storage, MaxAge: time.Hour}); err != nil {
		return nil, err
	}
	if _, err = f.js.CreateStream(ctx, jetstream.StreamConfig{Name: f.answer, Subjects: []string{f.answerSubject()},
		Storage: storage, MaxAge: time.Hour, Duplicates: 2 * time.Minute}); err != nil {
		return nil, err
	}
	if f.nc, err = nats.Connect(b.d.Infra.NATSURL, nats.Name("bench-floor-client")); err != nil {
		return nil, err
	}
	if f.client, err = jetstream.New(f.nc); err != nil {
		return nil, err
	}
	cons, err := f.client.OrderedConsumer(ctx, f.answer, jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.answerSubject()}})
	if err != nil {
		return nil, err
	}
	if f.reader, err = cons.Messages(); err != nil {
		return nil, err
	}
	go func() {
		for {
			m, err := f.reader.Next()
			if err != nil {
				return
			}
			f.answers.deliver(string(m.Data()), answer{at: time.Now()})
		}
	}()
	for range max(1, b.rep.Settings.Relays) {
		f.relays.Go(f.relay)
	}
	for i, steps := range path {
		next := f.answerSubject()
		if i+1 < len(path) {
			next = f.subject(i + 1)
		}
		stop, err := f.bus.Consume(ctx, bus.ConsumerConfig{Stream: f.work, Durable: "floor_" + strconv.Itoa(i),
			Filters: []string{f.subject(i)}, Workers: 32, AckWait: 10 * time.Second},
			func(ctx context.Context, d bus.Delivery) error {
				if err := f.stage(ctx, d.Data, steps); err != nil {
					f.fail(err)
					return nil // no redelivery: the arrival is counted lost
				}
				f.hand <- bus.Message{Subject: next, MsgID: f.prefix + "/" + strconv.Itoa(i) + "/" + string(d.Data), Data: d.Data}
				return nil
			})
		if err != nil {
			return nil, err
		}
		f.stops = append(f.stops, stop)
	}
	return f, nil
}

// stage runs one stage's steps for the arrival whose id is data.
func (f *floorRun) stage(ctx context.Context, data []byte, steps []floorStep) error {
	for _, s := range steps {
		switch s {
		case floorCommit:
			if _, err := f.pool.Exec(ctx, benchTag+`INSERT INTO `+f.table+` (v) VALUES ($1)`, string(data)); err != nil {
				return err
			}
		case floorRead:
			var v string
			if err := f.pool.QueryRow(ctx, benchTag+`SELECT v FROM `+f.table+` WHERE id = $1`, 1).Scan(&v); err != nil {
				return err
			}
		case floorVendor:
			i, _ := strconv.Atoi(string(data))
			order := f.prefix + "_" + string(data)
			if err := f.b.vendorCapture(ctx, "floor:"+order, captureBody(order, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// relay publishes what the stages hand it, as many at once as are
// waiting, and waits for JetStream's acknowledgements before the next.
func (f *floorRun) relay() {
	var batch []bus.Message
	for m := range f.hand {
		batch = append(batch[:0], m)
	more:
		for len(batch) < 256 {
			select {
			case m, ok := <-f.hand:
				if !ok {
					break more
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs := f.bus.PublishBatch(ctx, batch)
		cancel()
		if err := errors.Join(errs...); err != nil {
			f.fail(err)
		}
	}
}

// close stops everything startFloor started and removes the streams and
// the table.
func (f *floorRun) close() {
	for _, stop := range f.stops {
		stop()
	}
	if f.reader != nil {
		f.reader.Stop()
	}
	close(f.hand)
	f.relays.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if f.js != nil {
		_ = f.js.DeleteStream(ctx, f.work)
		_ = f.js.DeleteStream(ctx, f.answer)
	}
	if f.nc != nil {
		f.nc.Close()
	}
	if f.bus != nil {
		f.bus.Close()
	}
	if f.pool != nil {
		_, _ = f.pool.Exec(ctx, benchTag+`DROP TABLE IF EXISTS `+f.table)
		f.pool.Close()
	}
}
