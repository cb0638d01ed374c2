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
	var openErr error
	if c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			w, closeFn = f, func() { f.Close() }
		}
		openErr = err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // validated by conf.Parse
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: utcTime})).With(attrs...)
	if openErr != nil {
		// A log file that cannot be opened must not fail the pod's network
		// setup; say so on stderr, where the log goes instead.
		log.Warn("cannot open logFile, logging to stderr", "logFile", c.LogFile, "error", openErr)
	}
	return log, closeFn
}

// utcTime writes the log's times in UTC, as node logs are compared across
// machines; it also spares each process reading /etc/localtime.
func utcTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}
