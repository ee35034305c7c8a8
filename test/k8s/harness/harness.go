package main

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// harness owns the real device manager plus the bits of kubelet state it needs: the active pods.
type harness struct {
	manager *devicemanager.ManagerImpl
	// logger is handed to every manager call: since 1.37 the device manager logs through the
	// caller's logger instead of klog's global one.
	logger klog.Logger

	mu   sync.Mutex
	pods map[types.UID]*v1.Pod // admitted and not yet removed, in admission order below
	ord  []types.UID
}

// allSourcesReady tells the manager that the pod list is authoritative, so it frees devices of
// pods that are gone (otherwise stale allocations are never released).
type allSourcesReady struct{}

func (allSourcesReady) AddSource(string) {}
func (allSourcesReady) AllReady() bool   { return true }

func newHarness(logger klog.Logger) (*harness, error) {
	m, err := devicemanager.NewManagerImpl(logger, nil, topologymanager.NewFakeManager(logger))
	if err != nil {
		return nil, fmt.Errorf("creating device manager: %w", err)
	}
	h := &harness{manager: m, logger: logger, pods: map[types.UID]*v1.Pod{}}
	// Start removes every socket in the device-plugin directory and serves kubelet.sock, exactly
	// as a kubelet (re)start does: that is what makes plugins re-register.
	if err := m.Start(logger, h.activePods, allSourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("starting device manager: %w", err)
	}
	return h, nil
}

func (h *harness) stop(logger klog.Logger) {
	if err := h.manager.Stop(logger); err != nil {
		logger.Error(err, "stopping device manager")
	}
}

func (h *harness) activePods() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*v1.Pod, 0, len(h.ord))
	for _, uid := range h.ord {
		out = append(out, h.pods[uid])
	}
	return out
}

// admit follows the kubelet's admission order: the pod becomes active, every init container and
// then every app container is allocated, and the run options are read per container (which also
// calls PreStartContainer when a plugin asked for it). A failed admission leaves no trace.
func (h *harness) admit(ctx context.Context, pod *v1.Pod) (map[string]*devicemanager.DeviceRunContainerOptions, error) {
	h.mu.Lock()
	if _, dup := h.pods[pod.UID]; dup {
		h.mu.Unlock()
		return nil, fmt.Errorf("pod %s is already admitted", pod.UID)
	}
	h.pods[pod.UID] = pod
	h.ord = append(h.ord, pod.UID)
	h.mu.Unlock()

	// The kubelet admits a new pod with the add operation; any other operation (a resize) is a
	// no-op in the device manager, so it is never what admission means here.
	ctx = klog.NewContext(ctx, h.logger)
	fail := func(err error) (map[string]*devicemanager.DeviceRunContainerOptions, error) {
		h.remove(pod.UID)
		return nil, err
	}
	for i := range pod.Spec.InitContainers {
		if err := h.manager.Allocate(ctx, pod, &pod.Spec.InitContainers[i], lifecycle.AddOperation); err != nil {
			return fail(err)
		}
	}
	for i := range pod.Spec.Containers {
		if err := h.manager.Allocate(ctx, pod, &pod.Spec.Containers[i], lifecycle.AddOperation); err != nil {
			return fail(err)
		}
	}
	out := map[string]*devicemanager.DeviceRunContainerOptions{}
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		opts, err := h.manager.GetDeviceRunContainerOptions(ctx, pod, &all[i])
		if err != nil {
			return fail(err)
		}
		out[all[i].Name] = opts
	}
	return out, nil
}

// remove forgets a pod (as when it terminates) and lets the manager free its devices.
func (h *harness) remove(uid types.UID) bool {
	h.mu.Lock()
	_, ok := h.pods[uid]
	delete(h.pods, uid)
	for i, u := range h.ord {
		if u == uid {
			h.ord = append(h.ord[:i], h.ord[i+1:]...)
			break
		}
	}
	h.mu.Unlock()
	h.manager.UpdateAllocatedDevices(h.logger)
	return ok
}

// deviceState is one device as the manager sees it.
type deviceState struct {
	ID     string  `json:"id"`
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa,omitempty"`
}

// resourceState is one extended resource as the manager sees it.
type resourceState struct {
	Capacity    int64         `json:"capacity"`
	Allocatable int64         `json:"allocatable"`
	Devices     []deviceState `json:"devices"`
}

// state reads capacity through the public API and per-device health from the manager's own
// bookkeeping. The kubelet exposes unhealthy device IDs nowhere public, so they are read from the
// manager's unexported field under its own mutex; a Kubernetes bump that renames it fails loudly.
func (h *harness) state() (map[string]*resourceState, []string, error) {
	capacity, allocatable, removed := h.manager.GetCapacity(h.logger)
	out := map[string]*resourceState{}
	for name, q := range capacity {
		a := allocatable[name]
		out[string(name)] = &resourceState{Capacity: q.Value(), Allocatable: a.Value(), Devices: []deviceState{}}
	}
	for res, devs := range h.manager.GetAllocatableDevices(h.logger) {
		rs, ok := out[res]
		if !ok {
			continue
		}
		for id, d := range devs {
			rs.Devices = append(rs.Devices, deviceState{ID: id, Health: pluginapi.Healthy, NUMA: numaOf(d)})
		}
	}
	unhealthy, err := h.unhealthyDevices()
	if err != nil {
		return nil, nil, err
	}
	for res, ids := range unhealthy {
		rs, ok := out[res]
		if !ok {
			continue
		}
		for _, id := range ids {
			rs.Devices = append(rs.Devices, deviceState{ID: id, Health: pluginapi.Unhealthy})
		}
	}
	for _, rs := range out {
		sort.Slice(rs.Devices, func(i, j int) bool { return rs.Devices[i].ID < rs.Devices[j].ID })
	}
	sort.Strings(removed)
	return out, removed, nil
}

func numaOf(d *pluginapi.Device) []int64 {
	var out []int64
	for _, n := range d.GetTopology().GetNodes() {
		out = append(out, n.GetID())
	}
	return out
}

func (h *harness) unhealthyDevices() (map[string][]string, error) {
	v := reflect.ValueOf(h.manager).Elem()
	muField := v.FieldByName("mutex")
	unField := v.FieldByName("unhealthyDevices")
	if !muField.IsValid() || !unField.IsValid() {
		return nil, fmt.Errorf("devicemanager.ManagerImpl has no mutex/unhealthyDevices field: update the harness")
	}
	mu, ok := reflect.NewAt(muField.Type(), unsafe.Pointer(muField.UnsafeAddr())).Interface().(*sync.Mutex)
	if !ok {
		return nil, fmt.Errorf("devicemanager.ManagerImpl.mutex is %s, not sync.Mutex", muField.Type())
	}
	un, ok := reflect.NewAt(unField.Type(), unsafe.Pointer(unField.UnsafeAddr())).Interface().(*map[string]sets.Set[string])
	if !ok {
		return nil, fmt.Errorf("devicemanager.ManagerImpl.unhealthyDevices is %s", unField.Type())
	}
	mu.Lock()
	defer mu.Unlock()
	out := map[string][]string{}
	for res, ids := range *un {
		out[res] = sets.List(ids)
	}
	return out, nil
}

// providers adapts the harness to the kubelet's podresources server, so that podresources v1 is
// served from the very state the device manager keeps.
func (h *harness) providers() podresources.PodResourcesProviders {
	return podresources.PodResourcesProviders{
		Pods:             podsProvider{h},
		Devices:          devicesProvider{h.manager},
		Cpus:             noCPUs{},
		Memory:           noMemory{},
		DynamicResources: noDRA{},
	}
}

type podsProvider struct{ h *harness }

func (p podsProvider) GetActivePods() []*v1.Pod { return p.h.activePods() }
func (p podsProvider) GetPods() []*v1.Pod       { return p.h.activePods() }
func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.h.activePods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

type devicesProvider struct{ m *devicemanager.ManagerImpl }

func (d devicesProvider) UpdateAllocatedDevices(logger klog.Logger) {
	d.m.UpdateAllocatedDevices(logger)
}
func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return toContainerDevices(d.m.GetDevices(podUID, containerName))
}
func (d devicesProvider) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	return toContainerDevices(d.m.GetAllocatableDevices(logger))
}

// toContainerDevices mirrors the kubelet's (unexported) conversion: one entry per device and NUMA
// node, or one entry without topology when the plugin reported none.
func toContainerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for res, byID := range devs {
		for id, dev := range byID {
			nodes := dev.GetTopology().GetNodes()
			if len(nodes) == 0 {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &podresourcesapi.ContainerDevices{
					ResourceName: res,
					DeviceIds:    []string{id},
					Topology:     &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: n.GetID()}}},
				})
			}
		}
	}
	return out
}

type noCPUs struct{}

func (noCPUs) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (noCPUs) GetPodCPUs(string) []int64              { return nil }
func (noCPUs) GetAllocatableCPUs() []int64            { return nil }

type noMemory struct{}

func (noMemory) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (noMemory) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory {
	return nil
}

type noDRA struct{}

func (noDRA) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return nil
}
