package hosttest

import dto "github.com/prometheus/client_model/go"

// MetricValue is the value of the series of name with exactly the given
// labels (name, value, name, value, ...): a gauge's or a counter's value,
// a histogram's count; false when there is no such series.
func MetricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			match = match && want[l.GetName()] == l.GetValue()
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}
