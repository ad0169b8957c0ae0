package fresh

import (
	"strings"
	"testing"
)

// FuzzLeaseNotice: whatever arrives on the change channel (anyone who can
// connect may notify it), the listener neither panics nor grants itself a
// lease for a heartbeat it did not send, nor takes a stranger's
// acknowledgement for a peer's.
func FuzzLeaseNotice(f *testing.F) {
	for _, p := range []string{"12 345", "h me 3 1", "h other 7 2", "a other 9", "b other", "", " ", "h", "h me x y",
		"-1 -1", "99999999999999999999 1", "a  ", "h other 1 1 1", "p 7 1", "p 7", "p x 1", "p 7 1 1"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		l := newLeases(LeaseOptions{Instance: "me"}, Postgres{})
		l.ack, l.sent = make(chan int64, 1), map[uint64]sentAt{}
		l.others["peer"] = &peer{until: 1 << 62, acked: 5}
		l.heardNotice(payload)
		if l.until.Load() != 0 {
			t.Fatalf("%q granted a lease nobody asked for", payload)
		}
		if p := l.others["peer"]; p == nil {
			if payload != "b peer" {
				t.Fatalf("%q dropped a peer", payload)
			}
		} else if p.acked != 5 && !strings.HasPrefix(payload, "a peer ") && !strings.HasPrefix(payload, "h peer ") {
			t.Fatalf("%q moved the peer's acknowledgement to %d", payload, p.acked)
		}
	})
}
