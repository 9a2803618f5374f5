package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// The harness plays the kubelet of the DRA node: kwok runs no kubelet, so nobody
// else calls the node agent's NodePrepareResources and NodeUnprepareResources.

// kubeletCall sends one Prepare (prepare true) or Unprepare of claims to the agent's
// DRA socket and returns the per-claim errors as one error.
func kubeletCall(ctx context.Context, prepare bool, claims []*drapb.Claim) (map[string]*drapb.NodePrepareResourceResponse, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dra.plugin, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := drapb.NewDRAPluginClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var errs []string
	if prepare {
		resp, err := c.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
		if err != nil {
			return nil, err
		}
		for uid, r := range resp.Claims {
			if r.Error != "" {
				errs = append(errs, uid+": "+r.Error)
			}
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("prepare: %s", strings.Join(errs, "; "))
		}
		return resp.Claims, nil
	}
	resp, err := c.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		return nil, err
	}
	for uid, r := range resp.Claims {
		if r.Error != "" {
			errs = append(errs, uid+": "+r.Error)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("unprepare: %s", strings.Join(errs, "; "))
	}
	return nil, nil
}

// callThroughKill makes one kubelet call while the node agent is SIGKILLed at a random
// moment (before, during or after the call) and started again, then retries the call
// as the kubelet does until it succeeds.
func (h *harness) callThroughKill(ctx context.Context, prepare bool, claims []*drapb.Claim) (map[string]*drapb.NodePrepareResourceResponse, error) {
	agentCmd, pid, err := capture(env, draAgent)
	if err != nil {
		return nil, err
	}
	killed := make(chan error, 1)
	go func() {
		time.Sleep(jitter(h.rng, 30*time.Millisecond))
		killed <- kill(pid)
	}()
	_, first := kubeletCall(ctx, prepare, claims)
	if err := <-killed; err != nil {
		return nil, err
	}
	h.logf("node agent SIGKILLed during %s (the call: %v)", map[bool]string{true: "Prepare", false: "Unprepare"}[prepare], first)
	time.Sleep(jitter(h.rng, time.Second))
	if _, err := env.StartProcess(agentCmd.name, agentCmd.args[0], false, agentCmd.args[1:]...); err != nil {
		return nil, err
	}
	var resp map[string]*drapb.NodePrepareResourceResponse
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, last = kubeletCall(ctx, prepare, claims)
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the restarted agent did not answer the kubelet's retry in 60s: %v", last)
	}
	return resp, nil
}

// cdiSpecs lists the CDI spec files the agent wrote for claims.
func cdiSpecs(claims []*drapb.Claim) []string {
	var out []string
	for _, c := range claims {
		p := filepath.Join(dra.cdi, "gpu.gantry.dev-"+c.Uid+".json")
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// killAgentDuringPrepare binds a gang of DRA pods, then, as the kubelet, prepares
// their claims while the node agent is SIGKILLed and restarted, and unprepares them
// (the pods deleted) through another kill. What must hold: the retried Prepare gives
// each claim exactly the devices of its allocation, with a CDI spec; the retried
// Unprepare leaves no CDI spec; the invariants hold all along.
func killAgentDuringPrepare(ctx context.Context, h *harness, ns string) (int, error) {
	size := 2 + h.rng.IntN(2)
	var mem int64
	if h.rng.IntN(2) == 0 {
		mem = 8192
	}
	if err := createDRAGang(ctx, ns, "dra", size, mem); err != nil {
		return 0, err
	}
	if ps, err := waitPods(ctx, ns, 90*time.Second, allBound(size)); err != nil {
		return 0, fmt.Errorf("DRA gang not bound: %w%s", err, describe(ps))
	}
	list, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	var claims []*drapb.Claim
	want := map[string]map[string]bool{} // claim UID → allocated devices
	for _, c := range list.Items {
		if c.Status.Allocation == nil {
			return 0, fmt.Errorf("claim %s of a bound pod has no allocation", c.Name)
		}
		claims = append(claims, &drapb.Claim{Namespace: ns, Name: c.Name, Uid: string(c.UID)})
		want[string(c.UID)] = map[string]bool{}
		for _, r := range c.Status.Allocation.Devices.Results {
			want[string(c.UID)][r.Device] = true
		}
	}
	resp, err := h.callThroughKill(ctx, true, claims)
	if err != nil {
		return 0, err
	}
	for uid, devs := range want {
		got := resp[uid]
		if got == nil || len(got.Devices) != len(devs) {
			return 0, fmt.Errorf("claim %s prepared as %+v, want devices %v", uid, got, devs)
		}
		for _, d := range got.Devices {
			if !devs[d.DeviceName] || d.PoolName != draNode {
				return 0, fmt.Errorf("claim %s prepared with %s/%s, allocated %v", uid, d.PoolName, d.DeviceName, devs)
			}
		}
	}
	if specs := cdiSpecs(claims); len(specs) != len(claims) {
		return 0, fmt.Errorf("%d CDI specs for %d prepared claims", len(specs), len(claims))
	}
	// The pods end; the kubelet unprepares their claims.
	zero := int64(0)
	for _, c := range list.Items {
		_ = env.Client.CoreV1().Pods(ns).Delete(ctx, c.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	if _, err := h.callThroughKill(ctx, false, claims); err != nil {
		return 0, err
	}
	if specs := cdiSpecs(claims); len(specs) > 0 {
		return 0, fmt.Errorf("CDI specs left after Unprepare: %v", specs)
	}
	return 0, nil
}
