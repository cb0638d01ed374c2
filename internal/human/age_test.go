package human

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1400 * time.Millisecond: "1s", 59 * time.Second: "59s", 61 * time.Second: "1m",
		3*time.Hour + 5*time.Minute: "3h5m", 47 * time.Hour: "47h0m", 72 * time.Hour: "3d",
	} {
		assert.Equal(t, want, Age(d), "%v", d)
	}
}
