package app

import "os"

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "opledger"
	}
	return h
}
