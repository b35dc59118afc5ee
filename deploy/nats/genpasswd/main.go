// Command genpasswd makes the passwords of deploy/nats/nats.conf: for every
// user whose password is a $VARIABLE it writes a random password to
// <dir>/secrets/<user>.password (for the client: -nats-password-file) and
// its bcrypt hash to <dir>/passwords.conf (which nats.conf includes).
//
//	go run ./deploy/nats/genpasswd -dir deploy/nats
//
// Running it again keeps the passwords that exist (a new user, such as a new
// tenant's agent, gets one) and rewrites passwords.conf; reload the server
// (nats-server --signal reload, or docker compose kill -s HUP nats).
// -rotate replaces every password: restart the clients with theirs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/opledger/opledger/internal/natsauth"
)

func main() {
	dir := flag.String("dir", "deploy/nats", "directory holding nats.conf; passwords.conf and secrets/ are written there")
	conf := flag.String("conf", "", "the configuration to read users from (default <dir>/nats.conf)")
	cost := flag.Int("cost", 11, "bcrypt cost")
	rotate := flag.Bool("rotate", false, "replace every password, not only the missing ones")
	flag.Parse()
	if *conf == "" {
		*conf = filepath.Join(*dir, "nats.conf")
	}
	data, err := os.ReadFile(*conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genpasswd:", err)
		os.Exit(1)
	}
	secrets, err := natsauth.Write(*dir, data, *cost, *rotate)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genpasswd:", err)
		os.Exit(1)
	}
	users := make([]string, 0, len(secrets))
	for u := range secrets {
		users = append(users, u)
	}
	sort.Strings(users)
	for _, u := range users {
		fmt.Println(natsauth.PasswordFile(*dir, u)) // the path, never the password
	}
	fmt.Println(filepath.Join(*dir, "passwords.conf"))
}
