package main

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// publisher writes the device manager's capacity into a Node's status, as the kubelet's
// node-status setter does, so the real scheduler can place pods that request extended resources
// on a kwok node.
type publisher struct {
	client   kubernetes.Interface
	nodeName string
}

func newPublisher(kubeconfig, nodeName string) (*publisher, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "devicemanager-harness"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &publisher{client: c, nodeName: nodeName}, nil
}

// publish merges the device-plugin resources into status.capacity/allocatable. Resources the
// manager dropped are set to zero, as the kubelet does, so that stale capacity does not linger.
func (p *publisher) publish(ctx context.Context, capacity, allocatable v1.ResourceList, removed []string) error {
	capOut := map[string]resource.Quantity{}
	allocOut := map[string]resource.Quantity{}
	for n, q := range capacity {
		capOut[string(n)] = q
	}
	for n, q := range allocatable {
		allocOut[string(n)] = q
	}
	for _, n := range removed {
		capOut[n] = resource.MustParse("0")
		allocOut[n] = resource.MustParse("0")
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": capOut, "allocatable": allocOut}})
	if err != nil {
		return err
	}
	// Sent every time, not only on change: another writer (kwok's node stages) may have replaced
	// the status in between, and one small patch per period is cheap.
	if _, err := p.client.CoreV1().Nodes().PatchStatus(ctx, p.nodeName, patch); err != nil {
		return fmt.Errorf("patching node %s status: %w", p.nodeName, err)
	}
	return nil
}
