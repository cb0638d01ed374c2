// Package human formats values for the operator's tables.
package human

import (
	"fmt"
	"time"
)

// Age is a duration as the tables show it: seconds under a minute, then
// minutes, hours and minutes under two days, then days.
func Age(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
