package client

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// TenantResultsMaxBytes bounds the RESULTS stream EnsureResultsStream
// makes in a tenant's account: below the 1 GB of storage the example
// accounts of deploy/nats/nats.conf allow, so that the stream drops its
// oldest results before the account refuses new ones.
const TenantResultsMaxBytes = 512 << 20

// MinResultsMaxBytes is the smallest byte bound CreateBoundedStream tries
// for a RESULTS stream before it makes one without a byte bound.
const MinResultsMaxBytes = 64 << 20

// CreateBoundedStream creates the stream sc. Where the NATS server or the
// account lacks the storage sc.MaxBytes asks for (JetStream sets a bounded
// stream's bytes aside when it creates it), it halves the bound and tries
// again, down to floor, and below that makes the stream without a byte
// bound, bounded by the storage alone. The returned stream's configuration
// says which bound it got. The services make their RESULTS with it too.
func CreateBoundedStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, floor int64) (jetstream.Stream, error) {
	for {
		st, err := js.CreateStream(ctx, sc)
		if !NoStorageRoom(err) || sc.MaxBytes <= 0 {
			return st, err
		}
		if sc.MaxBytes /= 2; sc.MaxBytes < floor {
			sc.MaxBytes = 0
		}
	}
}

// NoStorageRoom reports whether err is JetStream's refusal to make a
// stream bigger than the storage its server or account has room for
// (JSStorageResourcesExceededErr, JSMemoryResourcesExceededErr).
func NoStorageRoom(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jsStorageExceeded || apiErr.ErrorCode == jsMemoryExceeded)
}

// storeFull reports whether err is JetStream's refusal to store a message
// in a stream that reached its bound (maximum bytes or messages).
func storeFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsStoreFailed && strings.Contains(apiErr.Description, "maximum")
}

// JetStream's error codes: a stream with no room (storage, memory), and a
// message its stream did not store (JSStreamStoreFailedF; the description
// says why).
const (
	jsStorageExceeded jetstream.ErrorCode = 10047
	jsMemoryExceeded  jetstream.ErrorCode = 10028
	jsStoreFailed     jetstream.ErrorCode = 10077
)
