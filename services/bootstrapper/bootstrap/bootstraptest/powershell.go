package bootstraptest

import (
	"errors"
	"fmt"
	"strings"
)

// CheckPowerShell is a small well-formedness check of a PowerShell script
// for Windows PowerShell 5.1 (what cloudbase-init runs). It is no
// PowerShell parser; it tokenizes just enough to check, and reports with
// line numbers:
//
//   - the first line is exactly header, when header is not empty (e.g.
//     cloudbase-init's "#ps1_sysnative");
//   - every single-quoted string ('…', a quote inside doubled), double-
//     quoted string ("…", escapes with a backtick, "" inside, and $( … )
//     subexpressions whose code is checked the same way), here-string
//     (@'…'@ and @"…"@, the closing mark at the start of a line) and
//     block comment (<# … #>) is closed;
//   - (), {} and [] outside strings and comments are balanced and nested
//     properly (a ) never closes a {);
//   - no && or || outside strings: pipeline chain operators came with
//     PowerShell 7 and are a parse error in 5.1 (and the sign of a bash
//     line pasted into a PowerShell script).
//
// What it does not check: the names of commands and parameters, the
// grammar between the brackets, or what the script does.
func CheckPowerShell(script, header string) error {
	var errs []error
	if header != "" {
		first, _, _ := strings.Cut(script, "\n")
		if strings.TrimSuffix(first, "\r") != header {
			errs = append(errs, fmt.Errorf("line 1: %q, want the header %s", first, header))
		}
	}
	s := &psScanner{src: script, line: 1}
	s.code(0)
	for _, o := range s.stack {
		errs = append(errs, fmt.Errorf("line %d: %q is never closed", o.line, o.ch))
	}
	return errors.Join(append(errs, s.errs...)...)
}

type psOpen struct {
	ch   byte
	line int
}

type psScanner struct {
	src   string
	i     int
	line  int
	stack []psOpen
	errs  []error
}

func (s *psScanner) fail(line int, format string, a ...any) {
	s.errs = append(s.errs, fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, a...)))
}

func (s *psScanner) peek(k int) byte {
	if s.i+k < len(s.src) {
		return s.src[s.i+k]
	}
	return 0
}

// code scans code until the end, or until the ) that closes a $( of a
// double-quoted string (depth is the stack's size at that $().
func (s *psScanner) code(depth int) {
	closers := map[byte]byte{')': '(', '}': '{', ']': '['}
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\n':
			s.line++
			s.i++
		case c == '`':
			if s.peek(1) == '\n' {
				s.line++
			}
			s.i += 2 // an escaped character (or a line continuation)
		case c == '<' && s.peek(1) == '#':
			s.blockComment()
		case c == '#':
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.i++
			}
		case c == '@' && (s.peek(1) == '\'' || s.peek(1) == '"') && (s.peek(2) == '\n' || s.peek(2) == '\r'):
			s.hereString(s.peek(1))
		case c == '\'':
			s.single()
		case c == '"':
			s.double()
		case (c == '&' && s.peek(1) == '&') || (c == '|' && s.peek(1) == '|'):
			s.fail(s.line, "%q is not an operator of Windows PowerShell 5.1 (use if ($?) or -and/-or)", s.src[s.i:s.i+2])
			s.i += 2
		case c == '(' || c == '{' || c == '[':
			s.stack = append(s.stack, psOpen{c, s.line})
			s.i++
		case c == ')' || c == '}' || c == ']':
			if c == ')' && len(s.stack) == depth && depth > 0 {
				s.i++ // the end of a $( … ) subexpression
				return
			}
			switch {
			case len(s.stack) <= depth:
				s.fail(s.line, "%q closes nothing open", c)
			case s.stack[len(s.stack)-1].ch != closers[c]:
				o := s.stack[len(s.stack)-1]
				s.fail(s.line, "%q does not close the %q of line %d", c, o.ch, o.line)
			default:
				s.stack = s.stack[:len(s.stack)-1]
			}
			s.i++
		default:
			s.i++
		}
	}
}

func (s *psScanner) blockComment() {
	start := s.line
	s.i += 2
	for s.i < len(s.src) {
		if s.src[s.i] == '#' && s.peek(1) == '>' {
			s.i += 2
			return
		}
		if s.src[s.i] == '\n' {
			s.line++
		}
		s.i++
	}
	s.fail(start, "block comment <# is never closed")
}

func (s *psScanner) single() {
	start := s.line
	s.i++
	for s.i < len(s.src) {
		switch s.src[s.i] {
		case '\'':
			if s.peek(1) == '\'' {
				s.i += 2
				continue
			}
			s.i++
			return
		case '\n':
			s.line++
		}
		s.i++
	}
	s.fail(start, "single-quoted string is never closed")
}

func (s *psScanner) double() {
	start := s.line
	s.i++
	for s.i < len(s.src) {
		switch c := s.src[s.i]; {
		case c == '`':
			if s.peek(1) == '\n' {
				s.line++
			}
			s.i += 2
			continue
		case c == '"':
			if s.peek(1) == '"' {
				s.i += 2
				continue
			}
			s.i++
			return
		case c == '$' && s.peek(1) == '(':
			s.i += 2
			s.stack = append(s.stack, psOpen{'(', s.line})
			depth := len(s.stack)
			s.code(depth)
			if len(s.stack) == depth {
				s.stack = s.stack[:depth-1]
			}
			continue
		case c == '\n':
			s.line++
		}
		s.i++
	}
	s.fail(start, "double-quoted string is never closed")
}

// hereString scans @'…'@ or @"…"@: the closing mark starts a line.
func (s *psScanner) hereString(q byte) {
	start := s.line
	s.i += 2
	for s.i < len(s.src) {
		if s.src[s.i] == '\n' {
			s.line++
			s.i++
			if s.i+1 < len(s.src) && s.src[s.i] == q && s.src[s.i+1] == '@' {
				s.i += 2
				return
			}
			continue
		}
		s.i++
	}
	s.fail(start, "here-string @%c is never closed", q)
}
