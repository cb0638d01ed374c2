package pinstore

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/regfile"
)

// NewLogger returns a JSON-lines logger writing to the configured log file
// or stderr; stdout belongs to the CNI result alone.
func NewLogger(c *conf.Config, attrs ...any) (*slog.Logger, func()) {
	var w io.Writer = os.Stderr
	closeFn := func() {}
	var openErr error
	if c.LogFile != "" {
		f, err := OpenLogFile(c.LogFile)
		if err == nil {
			w, closeFn = f, func() { f.Close() }
		}
		openErr = err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // validated by conf.Parse
	// The log's times are in UTC, as node logs are compared across
	// machines; it also spares each process reading /etc/localtime.
	utcTime := func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			a.Value = slog.TimeValue(a.Value.Time().UTC())
		}
		return a
	}
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: utcTime})).With(attrs...)
	if openErr != nil {
		// A log file that cannot be opened must not fail the pod's network
		// setup; say so on stderr, where the log goes instead.
		log.Warn("cannot open logFile, logging to stderr", "logFile", c.LogFile, "error", openErr)
	}
	return log, closeFn
}

// OpenLogFile opens logFile for appending as root does it safely in a
// directory others may write to (/var/log is root:syslog 0775 on Debian):
// never through a symlink, without blocking (a FIFO), and only a regular
// file; anything else is an error naming it.
func OpenLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	if err != nil {
		// O_NOFOLLOW on a symlink fails with ELOOP: name what is there.
		if fi, lerr := os.Lstat(path); lerr == nil && !fi.Mode().IsRegular() {
			return nil, notRegular(path, fi)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func notRegular(path string, fi fs.FileInfo) error {
	return fmt.Errorf("logFile %s is %s, not a regular file: not opened", path, regfile.Kind(fi.Mode()))
}
