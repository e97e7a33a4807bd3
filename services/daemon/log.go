package daemon

import (
	"io"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// NewLogger returns a logger that writes to w at cfg.LogLevel in
// cfg.LogFormat: JSON lines, or zerolog's human console format; "auto" (the
// default) is console when w is a terminal and JSON otherwise. Every line
// has a timestamp. An unknown level means info and an unknown format JSON
// (Validate reports both). The logger carries no service field: Run adds
// service=<name>.
func NewLogger(cfg Config, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil || cfg.LogLevel == "" {
		level = zerolog.InfoLevel
	}
	format := cfg.LogFormat
	if format == "" || format == LogFormatAuto {
		format = LogFormatJSON
		if isTerminal(w) {
			format = LogFormatConsole
		}
	}
	if format == LogFormatConsole {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// isTerminal tells whether w is a terminal (an *os.File or anything else
// with a file descriptor).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// PreciseTimestamps makes every zerolog timestamp in the process carry
// sub-second precision, which ordering events across services needs. It
// changes a process-wide setting, so only program entry points call it
// (Main and cmd/capn do).
func PreciseTimestamps() { zerolog.TimeFieldFormat = time.RFC3339Nano }
