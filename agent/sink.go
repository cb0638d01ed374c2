package agent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventSink wraps the sink the event recorder writes to so that every
// Event the API refuses or fails is counted (api_errors_total{op="event"})
// and a refusal is said (readiness, status file): the recorder itself
// only logs them.
func (a *Agent) EventSink(inner record.EventSink) record.EventSink {
	return &countingSink{inner: inner, a: a}
}

// UseRecorder sets the recorder the agent posts Events with (made after
// New, around EventSink).
func (a *Agent) UseRecorder(r record.EventRecorder) { a.cfg.Recorder = r }

type countingSink struct {
	inner record.EventSink
	a     *Agent
}

func (s *countingSink) done(verb string, err error) {
	if err != nil {
		s.a.apiError("event", verb, "events", nil, err)
		return
	}
	s.a.apiOK(verb, "events")
}

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.inner.Create(e)
	s.done("create", err)
	return out, err
}

func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.inner.Update(e)
	s.done("update", err)
	return out, err
}

func (s *countingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out, err := s.inner.Patch(e, data)
	s.done("patch", err)
	return out, err
}
