package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/guildhall/guildhall/internal/webhook"
)

// receiverEnv makes the test binary a receiver (TestMain): it answers 204
// to every request on a loopback port it prints, until its input closes.
const receiverEnv = "GUILDHALL_TEST_RECEIVER"

func TestMain(m *testing.M) {
	if os.Getenv(receiverEnv) != "" {
		serveReceiver()
		return
	}
	os.Exit(m.Run())
}

func serveReceiver() {
	awayFromSender()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
}

// awayFromSender moves the receiver to the CPUs its sender was not pinned
// to (taskset), if there are any, so that the two do not share a core; a
// sender pinned to none leaves it where it is.
func awayFromSender() {
	var sender, others unix.CPUSet
	if unix.SchedGetaffinity(0, &sender) != nil {
		return
	}
	for cpu := range len(sender) * 64 {
		if !sender.IsSet(cpu) {
			others.Set(cpu)
		}
	}
	_ = unix.SchedSetaffinity(0, &others) // EINVAL: no other CPU; stay
}

// receiverProcess starts the test binary as a receiver in a process of its
// own, so that the benchmark's CPU is the sender's alone, and returns its
// URL.
func receiverProcess(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), receiverEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the receiver did not say its address: %v", err)
	}
	return "http://" + strings.TrimSpace(addr) + "/hook"
}

// BenchmarkAttempt is the sender's side of a delivery: the CPU one attempt
// costs this process (cpu-ns/op; the receiver runs in another), with
// DefaultConcurrency attempts in flight to one prompt receiver on
// loopback, as the deliverer makes them. "bare" is the same POST with
// net/http alone, unsigned and with no header of its own: what any
// delivery made with the standard library costs at least, whatever the
// queue around it.
//
//	taskset -c 1 go test -run '^$' -bench Attempt -cpu 1 ./internal/webhook
//
// (pinned, the receiver takes the other CPUs).
func BenchmarkAttempt(b *testing.B) {
	url := receiverProcess(b)
	client := webhook.NewClient(webhook.Options{AllowPrivate: true})
	body := []byte(`{"actor_id":"01a2329c-b691-7c19-a356-263c8688a318","created_at":"2026-12-01T17:17:42.825993Z",` +
		`"data":{"display_name":"Perf 1","email":null,"id":"01a2329c-be29-7f25-bf8c-66ca3a345b00","is_owner":false,` +
		`"roles":[],"status":"active","username":"p1"},"reason":null,"seq":10042,` +
		`"subject":"user:01a2329c-be29-7f25-bf8c-66ca3a345b00","type":"user.created"}`)
	d := webhook.Delivery{ID: "01a2329c-be2a-7f25-bf8c-66ca3a345b01", Body: body}
	secrets := []string{webhook.NewSecret()}
	run := func(b *testing.B, attempt func() error) {
		b.SetParallelism(max(1, webhook.DefaultConcurrency/runtime.GOMAXPROCS(0)))
		b.ReportAllocs()
		cpu0 := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := attempt(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("attempt", func(b *testing.B) {
		run(b, func() error {
			if o := webhook.Attempt(context.Background(), client, url, d, secrets, time.Now()); o.Result != webhook.Delivered {
				return fmt.Errorf("attempt: %v, status %d, %v", o.Result, o.Status, o.Err)
			}
			return nil
		})
	})
	b.Run("bare", func(b *testing.B) {
		run(b, func() error {
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				return fmt.Errorf("bare: status %d", resp.StatusCode)
			}
			return nil
		})
	})
}

// processCPU is the CPU this process has used, user and system, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
