package cephfixture

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A /proc/net/tcp value may be hex without a decimal digit (a port 0xCAAA):
// it is a number all the same, and the shape does not change with it.
func TestFileShapeOfTCPTables(t *testing.T) {
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	a := header + "   0: 0A61000A:CAAA 0A61000A:0CE4 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 0 10 -1\n"
	b := header + "   0: 0A61000A:9F12 0A61000A:0CE4 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 0 10 -1\n"
	assert.Equal(t, FileShape("proc_net_tcp", a), FileShape("proc_net_tcp", b))
	assert.Equal(t, FileShape("ipv6/proc_net_tcp6", a), FileShape("ipv6/proc_net_tcp6", b))
	assert.Contains(t, FileShape("proc_net_tcp", a), "tm->when", "the header keeps its words")
}
