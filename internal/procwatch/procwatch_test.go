package procwatch

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// startLauncher starts a process that starts one child living for
// childLife and then runs on without ever reaping it, as a stuck mpirun.
func startLauncher(t *testing.T, childLife string) *exec.Cmd {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sh", "-c", "(sleep "+childLife+") & exec sleep 60")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func TestOutlived(t *testing.T) {
	cmd := startLauncher(t, "0.7")
	deadline := time.Now().Add(5 * time.Second)
	for len(Running(cmd.Process.Pid)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the launcher's child never showed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if !Outlived(ctx, cmd.Process.Pid, 300*time.Millisecond) {
		t.Fatal("the launcher outlived its child, and Outlived did not say so")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Outlived returned after %v, before the grace of 300ms", took)
	}
	kids := Children(cmd.Process.Pid)
	if len(kids) != 1 || !kids[0].Exited() || len(Running(cmd.Process.Pid)) != 0 {
		t.Errorf("children %+v: want one exited", kids)
	}
}

// A launcher whose children still run is not outlived; Outlived returns
// false when its context ends.
func TestNotOutlived(t *testing.T) {
	cmd := startLauncher(t, "30")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if Outlived(ctx, cmd.Process.Pid, 100*time.Millisecond) {
		t.Fatal("Outlived while the child still runs")
	}
}
