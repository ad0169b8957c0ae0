package main

import "testing"

// The start-up line tells the truth: a loopback URL only when the server
// listens on loopback alone.
func TestListeningOn(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"[::1]:8080", "http://[::1]:8080"},
		{"10.0.0.5:80", "http://10.0.0.5:80"},
		{"0.0.0.0:8080", "every interface, port 8080 (http://127.0.0.1:8080 from this machine)"},
		{"[::]:8080", "every interface, port 8080 (http://127.0.0.1:8080 from this machine)"},
	} {
		if got := listeningOn(tc.addr); got != tc.want {
			t.Errorf("listeningOn(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
