package httpapi

import (
	"strconv"
	"sync"

	"github.com/guildhall/guildhall/internal/apperr"
)

// retryAfterStreams is the Retry-After of a stream refused for the user's
// streams: no time frees a slot, closing a stream does, so it is the
// reconnect delay the stream itself announces (retry: 2000).
const retryAfterStreams = "2"

// streamSlots counts the event streams each user has open on this instance,
// so that however many tokens or tickets a user holds, their streams, and
// the work each event costs per stream, stay bounded.
type streamSlots struct {
	max  int
	mu   sync.Mutex
	open map[string]int // user ID → open streams; no entry at 0
}

func newStreamSlots(max int) *streamSlots {
	return &streamSlots{max: max, open: map[string]int{}}
}

// refusal is the 429 of a user whose slots are all taken.
func (s *streamSlots) refusal() error {
	return apperr.RateLimited(retryAfterStreams,
		"You have "+strconv.Itoa(s.max)+" event streams open on this server, the most allowed; close one first.")
}

// check refuses when the user's slots are all taken, taking none (HEAD,
// which answers what GET would without opening a stream).
func (s *streamSlots) check(userID string) error {
	if s.count(userID) >= s.max {
		return s.refusal()
	}
	return nil
}

// acquire takes one of the user's slots, or refuses with a 429 when they
// are all taken. The returned release frees it; it may be called more than
// once.
func (s *streamSlots) acquire(userID string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[userID] >= s.max {
		return nil, s.refusal()
	}
	s.open[userID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[userID]--; s.open[userID] <= 0 {
				delete(s.open, userID)
			}
		})
	}, nil
}

// count is the number of streams the user has open.
func (s *streamSlots) count(userID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[userID]
}
