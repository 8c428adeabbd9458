package jobenv

import (
	"fmt"
	"strings"
	"testing"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name  string
		vars  map[string]string
		want  Place
		found bool
		err   string // a substring of the error
	}{
		{name: "none", vars: map[string]string{"HOME": "/root"}},
		{name: "slurm batch script is not a step", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}},
		{
			name:  "torchrun",
			vars:  map[string]string{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"},
			want:  Place{Source: "torchrun", Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29400},
			found: true,
		},
		{
			name: "torchrun's agent holds MASTER_PORT",
			vars: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
				"TORCHELASTIC_USE_AGENT_STORE": "True"},
			want:  Place{Source: "torchrun", Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500, AgentStore: true},
			found: true,
		},
		{
			name:  "torchrun by hand on one node",
			vars:  map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "1234"},
			want:  Place{Source: "torchrun", Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, MasterAddr: "localhost", MasterPort: 1234},
			found: true,
		},
		{
			name:  "one rank needs no store",
			vars:  map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			want:  Place{Source: "torchrun", Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, MasterPort: DefaultPort},
			found: true,
		},
		{
			name:  "torchrun wins over mpirun",
			vars:  map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"},
			want:  Place{Source: "torchrun", Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2, MasterAddr: "h", MasterPort: 1},
			found: true,
		},
		{
			name:  "openmpi",
			vars:  map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			want:  Place{Source: "openmpi", Rank: 3, Size: 4, LocalRank: 1, LocalSize: 2, MasterPort: DefaultPort},
			found: true,
		},
		{
			name:  "pmi",
			vars:  map[string]string{"PMI_RANK": "2", "PMI_SIZE": "3", "MASTER_ADDR": "n1"},
			want:  Place{Source: "pmi", Rank: 2, Size: 3, LocalRank: 2, LocalSize: 3, MasterAddr: "n1", MasterPort: DefaultPort},
			found: true,
		},
		{
			name: "slurm step",
			vars: map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1",
				"SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_STEP_NODELIST": "gpu[007-009]"},
			want:  Place{Source: "slurm", Rank: 5, Size: 6, LocalRank: 1, LocalSize: 2, MasterAddr: "gpu007", MasterPort: DefaultPort},
			found: true,
		},
		{name: "rank not a number", vars: map[string]string{"RANK": "one", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, found: true, err: `RANK="one" is not a non-negative integer`},
		{name: "negative", vars: map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, found: true, err: `RANK="-1"`},
		{name: "world size missing", vars: map[string]string{"RANK": "0"}, found: true, err: "WORLD_SIZE is not set"},
		{name: "rank outside", vars: map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, found: true, err: "rank 2 is outside a world of 2 ranks"},
		{name: "zero ranks", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, found: true, err: "world size (torchrun variables) is 0"},
		{name: "no master", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}, found: true, err: "MASTER_ADDR is not set"},
		{name: "no port", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, found: true, err: "MASTER_PORT is not set"},
		{name: "bad port", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, found: true, err: "MASTER_PORT=70000 is not a TCP port"},
		{name: "local rank outside", vars: map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, found: true, err: "local rank 2 is outside the node's 2 ranks"},
		{name: "slurm bad tasks", vars: map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "two"}, found: true, err: "SLURM_STEP_TASKS_PER_NODE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := FromEnv(env(tc.vars))
			if found != tc.found {
				t.Fatalf("found = %v, want %v", found, tc.found)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestStoreAddr(t *testing.T) {
	p := Place{MasterAddr: "10.0.0.1", MasterPort: 29500}
	if got := p.Addr(); got != "10.0.0.1:29500" {
		t.Errorf("Addr() = %q", got)
	}
	p.AgentStore = true // torchrun's TCPStore holds 29500
	if got := p.Addr(); got != "10.0.0.1:29501" {
		t.Errorf("under torchrun's agent store, Addr() = %q", got)
	}
	p.MasterPort = 65535
	if got := p.StorePort(); got != 65534 {
		t.Errorf("StorePort() = %d", got)
	}
}

func TestFirstHost(t *testing.T) {
	tests := []struct{ list, want, err string }{
		{list: "node1", want: "node1"},
		{list: "a,b", want: "a"},
		{list: "gpu[003-004,010],login1", want: "gpu003"},
		{list: "n[12]", want: "n12"},
		{list: "n[1-2]-ib,m", want: "n1-ib"},
		{list: "", err: "empty"},
		{list: ",x", err: "empty host name"},
		{list: "n[1-2", err: "no ]"},
		{list: "n[x-2]", err: "not a node number"},
	}
	for _, tc := range tests {
		got, err := FirstHost(tc.list)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("FirstHost(%q) = %q, %v; want error %q", tc.list, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", tc.list, got, err, tc.want)
		}
	}
}

func TestExpandTaskCounts(t *testing.T) {
	got, err := ExpandTaskCounts("2(x3),1")
	if err != nil || fmt.Sprint(got) != "[2 2 2 1]" {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "2(x0)", "2(x", "a(x2)", "2(x99999999)"} {
		if _, err := ExpandTaskCounts(bad); err == nil {
			t.Errorf("ExpandTaskCounts(%q) gave no error", bad)
		}
	}
}

// FuzzFromEnv checks that no environment makes FromEnv panic, and that a
// place it accepts is consistent.
func FuzzFromEnv(f *testing.F) {
	f.Add("1", "2", "0", "2", "h", "29500", "gpu[1-2]", "2(x2)")
	f.Add("", "", "", "", "", "", "n[", "3(x")
	f.Fuzz(func(t *testing.T, rank, size, local, localSize, addr, port, nodes, tasks string) {
		for _, vars := range []map[string]string{
			{"RANK": rank, "WORLD_SIZE": size, "LOCAL_RANK": local, "LOCAL_WORLD_SIZE": localSize, "MASTER_ADDR": addr, "MASTER_PORT": port},
			{"SLURM_STEP_ID": "0", "SLURM_PROCID": rank, "SLURM_NTASKS": size, "SLURM_LOCALID": local, "SLURM_NODEID": localSize, "SLURM_STEP_NODELIST": nodes, "SLURM_STEP_TASKS_PER_NODE": tasks},
		} {
			p, found, err := FromEnv(env(vars))
			if err != nil || !found {
				continue
			}
			if p.Rank < 0 || p.Rank >= p.Size || p.LocalRank < 0 || p.LocalRank >= p.LocalSize || p.LocalSize > p.Size {
				t.Fatalf("inconsistent place %+v from %v", p, vars)
			}
		}
	})
}
