//go:build unix

package store

import (
	"os"
	"syscall"
)

// openWALIndex maps the header of the wal-index at path read-only, or
// returns nil when there is none to map (not in WAL mode, not yet created).
func openWALIndex(path string) *walIndex {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil || fi.Size() < 2*walHeaderWords*4 {
		return nil // reading past the end of a mapped file faults
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return &walIndex{mem: mem, unmap: syscall.Munmap}
}
