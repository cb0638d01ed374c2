package hosttest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Shared is a fixture that the tests of one package share, such as a
// container runtime or a Kubernetes cluster: made by the first test that
// needs it, torn down once by TestMain (Main). A maker that fails after
// it started something returns what it made with the error, so that Main
// still tears that down.
type Shared[T any] struct {
	once sync.Once
	v    *T
	err  error
}

// Get returns the fixture, making it on first use; it fails (never skips)
// the test when that is impossible. what names the suite in the failure.
func (s *Shared[T]) Get(t testing.TB, what string, make func() (*T, error)) *T {
	t.Helper()
	s.once.Do(func() { s.v, s.err = make() })
	if s.err != nil {
		t.Fatalf("%s cannot run: %v", what, s.err)
	}
	return s.v
}

// Main runs the tests, then tears down whatever was made; a teardown that
// fails fails the run.
func (s *Shared[T]) Main(m *testing.M, what string, teardown func(*T) error) {
	code := m.Run()
	if s.v != nil {
		if err := teardown(s.v); err != nil {
			fmt.Fprintf(os.Stderr, "%s teardown: %v\n", what, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
