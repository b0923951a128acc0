package debugpage

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGroup: the HTML page groups digits by three with a narrow no-break
// space, and leaves numbers of three digits or fewer alone.
func TestGroup(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0", 999: "999", 1000: "1\u202f000", 884913: "884\u202f913", 1234567: "1\u202f234\u202f567",
	} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q; want %q", n, got, want)
		}
	}
}
