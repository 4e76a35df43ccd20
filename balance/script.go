package balance

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/hashicorp/go-hclog"
)

func init() {
	Register("script", func(s Spec) (engine.BalanceSource, error) { return NewScript(s) })
}

// defaultPath is the PATH a script gets when gatectl itself has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// waitDelay bounds how long a read waits, once the script has exited (or been
// killed), for descendants that still hold its stdout or stderr open.
const waitDelay = 250 * time.Millisecond

// Script is the "script" kind: it runs an argv and parses its stdout with
// ParseReading. A Script is immutable and safe for concurrent use; every Read starts
// a new process (wrap it in Cached to share reads).
//
// # The process
//
//   - argv, never a shell. argv[0] is looked up in gatectl's PATH when it has no
//     slash, and resolved against Dir when it is a relative path with one.
//   - Working directory: Dir, the config file's directory.
//   - Environment: nothing of gatectl's but PATH and HOME, then the literal Env
//     entries (which may override PATH or HOME), then the key: APIKeyEnv copied from
//     gatectl's environment under the same name, looked up on each run. A key that is
//     not set adds no entry and logs a warning (naming the variable, never a value);
//     the script still runs and may find its key elsewhere. PATH and HOME are passed
//     because interpreters need them (`#!/usr/bin/env python3`, pyenv and nvm shims,
//     user site-packages) and neither is a secret; nothing else is, so a secret in
//     gatectl's environment never reaches a script unless it is the configured key.
//   - stdin is empty. stdout is kept up to MaxOutput bytes and never logged; stderr
//     is counted and discarded (scripts print tracebacks, and tracebacks print URLs
//     and headers): to see it, run the script by hand.
//   - The script runs in its own process group. When the read's context ends
//     (Timeout, or the caller's) the whole group gets SIGKILL, so a hung script and
//     every child it spawned are gone. After a normal exit, descendants still holding
//     stdout or stderr are waited for at most 250ms, then killed with the group (the
//     output so far counts). A descendant that leaves the group (setsid) escapes the
//     kill; one that closed its pipes and stays in the group is left alone, because
//     once the script is reaped its group id may be reused.
//
// # The result
//
// Exit status 0 and stdout that ParseReading accepts make a reading; anything else is
// an error wrapping ErrTimeout, ErrExit, ErrStart or ErrOutput (or the caller's
// context error), which callers treat as a missing reading. Errors name the exit
// status and byte counts, never the output.
type Script struct {
	argv      []string
	dir       string
	env       []string // literal Env entries, sorted, "NAME=value"
	envNames  map[string]bool
	apiKeyEnv string
	timeout   time.Duration
	lookupEnv func(string) (string, bool)
	logger    hclog.Logger
}

// NewScript builds a script source from s.Script, s.Dir, s.Env, s.APIKeyEnv and
// s.Timeout. It validates the argv and the environment entries, and starts nothing.
func NewScript(s Spec) (*Script, error) {
	if len(s.Script) == 0 || s.Script[0] == "" {
		return nil, fieldErr("script", "needs an executable as its first element")
	}
	for i, a := range s.Script {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fieldErr(fmt.Sprintf("script[%d]", i), "contains a NUL byte")
		}
	}
	if err := checkEnvName("apiKeyEnv", s.APIKeyEnv, true); err != nil {
		return nil, err
	}
	sc := &Script{
		argv:      append([]string(nil), s.Script...),
		dir:       s.Dir,
		envNames:  map[string]bool{},
		apiKeyEnv: s.APIKeyEnv,
		timeout:   s.timeout(),
		lookupEnv: s.lookupEnv,
		logger:    s.logger(),
	}
	names := make([]string, 0, len(s.Env))
	for name := range s.Env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		field := fmt.Sprintf("env[%s]", name)
		if err := checkEnvName(field, name, false); err != nil {
			return nil, err
		}
		if name == s.APIKeyEnv {
			return nil, fieldErr(field, "is the apiKeyEnv variable: the key is copied from gatectl's environment, never written in the config")
		}
		if strings.IndexByte(s.Env[name], 0) >= 0 {
			return nil, fieldErr(field, "value contains a NUL byte")
		}
		sc.env = append(sc.env, name+"="+s.Env[name])
		sc.envNames[name] = true
	}
	return sc, nil
}

// checkEnvName validates an environment variable name.
func checkEnvName(field, name string, optional bool) error {
	if name == "" {
		if optional {
			return nil
		}
		return fieldErr(field, "empty variable name")
	}
	if strings.ContainsAny(name, "=\x00") {
		return fieldErr(field, "invalid variable name %q", name)
	}
	return nil
}

// Read runs the script once and parses its stdout. See Script for the contract.
func (s *Script) Read(parent context.Context) (engine.Reading, error) {
	if err := parent.Err(); err != nil {
		return engine.Reading{}, err
	}
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()

	path, err := s.executable()
	if err != nil {
		return engine.Reading{}, err
	}
	cmd := exec.CommandContext(ctx, path, s.argv[1:]...)
	cmd.Args[0] = s.argv[0]
	cmd.Dir = s.dir
	cmd.Env = s.environ()
	stdout := &capWriter{limit: MaxOutput}
	stderr := &capWriter{limit: 0}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = waitDelay
	ownProcessGroup(cmd)

	if err := cmd.Start(); err != nil {
		return engine.Reading{}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	werr := cmd.Wait()
	heldPipes := errors.Is(werr, exec.ErrWaitDelay)
	if heldPipes {
		// The script exited but descendants still held its pipes: they are still
		// alive, so the group id is still theirs, and they go too.
		killProcessGroup(cmd)
	}
	if werr != nil && !(heldPipes && cmd.ProcessState.Success()) {
		if perr := parent.Err(); perr != nil {
			return engine.Reading{}, fmt.Errorf("script cancelled by its caller; its process group was killed: %w", perr)
		}
		if ctx.Err() != nil {
			return engine.Reading{}, fmt.Errorf("%w: script ran longer than %s; its process group was killed", ErrTimeout, s.timeout)
		}
		status := "failed"
		if cmd.ProcessState != nil {
			status = cmd.ProcessState.String() // "exit status 2", "signal: killed"
		}
		return engine.Reading{}, fmt.Errorf("%w: %s (stderr: %d bytes, not shown)", ErrExit, status, stderr.n)
	}
	if stdout.n > stdout.limit {
		return engine.Reading{}, fmt.Errorf("%w: stdout has more than %d bytes", ErrOutput, MaxOutput)
	}
	r, dropped, err := parseReading(stdout.buf)
	if err != nil {
		return engine.Reading{}, err
	}
	if dropped > 0 {
		s.logger.Debug("malformed windows dropped", "dropped", dropped, "kept", len(r.Windows))
	}
	return r, nil
}

// executable resolves argv[0]: a bare name through gatectl's PATH, a relative path
// against Dir.
func (s *Script) executable() (string, error) {
	name := s.argv[0]
	if strings.ContainsRune(name, filepath.Separator) || strings.ContainsRune(name, '/') {
		if !filepath.IsAbs(name) && s.dir != "" {
			name = filepath.Join(s.dir, name)
		}
		return name, nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	return path, nil
}

// environ builds the script's environment: PATH and HOME, the literal entries, the
// key. It reads the key now, so a rotated key reaches this run.
func (s *Script) environ() []string {
	env := make([]string, 0, len(s.env)+3)
	if !s.envNames["PATH"] {
		p, ok := s.lookupEnv("PATH")
		if !ok || p == "" {
			p = defaultPath
		}
		env = append(env, "PATH="+p)
	}
	if !s.envNames["HOME"] {
		if h, ok := s.lookupEnv("HOME"); ok && h != "" {
			env = append(env, "HOME="+h)
		}
	}
	env = append(env, s.env...)
	if s.apiKeyEnv != "" {
		if key, ok := s.lookupEnv(s.apiKeyEnv); ok && key != "" {
			env = append(env, s.apiKeyEnv+"="+key)
		} else {
			s.logger.Warn("apiKeyEnv is not set; running the script without it", "apiKeyEnv", s.apiKeyEnv)
		}
	}
	return env
}

// capWriter keeps the first limit bytes written to it and counts all of them. It
// never fails a write, so a chatty process is drained rather than blocked.
type capWriter struct {
	buf   []byte
	limit int
	n     int
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	if room := w.limit - len(w.buf); room > 0 {
		if len(p) > room {
			w.buf = append(w.buf, p[:room]...)
		} else {
			w.buf = append(w.buf, p...)
		}
	}
	return len(p), nil
}

var _ engine.BalanceSource = (*Script)(nil)
