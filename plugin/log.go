package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/netns-pin/netns-pin/conf"
)

// newLogger returns a JSON-lines logger writing to the configured log file
// or stderr; stdout belongs to the CNI result alone.
func newLogger(c *conf.Config, attrs ...any) (*slog.Logger, func()) {
	var w io.Writer = os.Stderr
	closeFn := func() {}
	if c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			w, closeFn = f, func() { f.Close() }
		}
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(h).With(attrs...), closeFn
}
