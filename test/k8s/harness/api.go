package main

import (
	"encoding/json"
	"net/http"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

// The control API, JSON over HTTP on a unix socket:
//
//	GET    /healthz              200 "ok" once the manager serves kubelet.sock
//	GET    /state                {"resources": {name: {capacity, allocatable, devices: [{id, health, numa}]}}, "removed": [...]}
//	POST   /pods                 body: a v1.Pod (uid, name, namespace, containers with limits)
//	                             200 {"containers": {name: runOptions}} or 422 {"error": "..."} (UnexpectedAdmissionError)
//	GET    /pods                 {"pods": [uid, ...]}
//	DELETE /pods/{uid}           204, or 404 when unknown
//	POST   /node/sync            publish capacity to the Node now (409 without -kubeconfig)
//
// Errors are JSON {"error": "..."} so the Python client can show the manager's own message.
func newAPI(h *harness, pub *publisher) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.manager.GetHealthChecker().Check(nil); err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		res, removed, err := h.state()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if removed == nil {
			removed = []string{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"resources": res, "removed": removed})
	})
	mux.HandleFunc("POST /pods", func(w http.ResponseWriter, r *http.Request) {
		var pod v1.Pod
		if err := json.NewDecoder(r.Body).Decode(&pod); err != nil {
			writeError(w, http.StatusBadRequest, "decoding pod: "+err.Error())
			return
		}
		if pod.UID == "" || pod.Name == "" {
			writeError(w, http.StatusBadRequest, "pod needs metadata.uid and metadata.name")
			return
		}
		opts, err := h.admit(r.Context(), &pod)
		if err != nil {
			writeError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		out := map[string]runOptions{}
		for name, o := range opts {
			out[name] = toRunOptions(o)
		}
		writeJSON(w, http.StatusOK, map[string]any{"containers": out})
	})
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, _ *http.Request) {
		uids := []string{}
		for _, p := range h.activePods() {
			uids = append(uids, string(p.UID))
		}
		writeJSON(w, http.StatusOK, map[string]any{"pods": uids})
	})
	mux.HandleFunc("DELETE /pods/{uid}", func(w http.ResponseWriter, r *http.Request) {
		if !h.remove(types.UID(r.PathValue("uid"))) {
			writeError(w, http.StatusNotFound, "no such pod")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /node/sync", func(w http.ResponseWriter, r *http.Request) {
		if pub == nil {
			writeError(w, http.StatusConflict, "harness runs without -kubeconfig")
			return
		}
		capacity, allocatable, removed := h.manager.GetCapacity(h.logger)
		if err := pub.publish(r.Context(), capacity, allocatable, removed); err != nil {
			writeError(w, http.StatusBadGateway, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// runOptions is what the kubelet would hand to the container runtime for one container.
type runOptions struct {
	Envs        map[string]string `json:"envs"`
	Mounts      []mount           `json:"mounts"`
	Devices     []device          `json:"devices"`
	Annotations map[string]string `json:"annotations"`
	CDIDevices  []string          `json:"cdi_devices"`
}

type mount struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	ReadOnly      bool   `json:"read_only"`
}

type device struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	Permissions   string `json:"permissions"`
}

func toRunOptions(o *devicemanager.DeviceRunContainerOptions) runOptions {
	out := runOptions{Envs: map[string]string{}, Mounts: []mount{}, Devices: []device{},
		Annotations: map[string]string{}, CDIDevices: []string{}}
	if o == nil {
		return out
	}
	for _, e := range o.Envs {
		out.Envs[e.Name] = e.Value
	}
	for _, m := range o.Mounts {
		out.Mounts = append(out.Mounts, mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range o.Devices {
		out.Devices = append(out.Devices, device{ContainerPath: d.PathInContainer, HostPath: d.PathOnHost, Permissions: d.Permissions})
	}
	for _, a := range o.Annotations {
		out.Annotations[a.Name] = a.Value
	}
	for _, c := range o.CDIDevices {
		out.CDIDevices = append(out.CDIDevices, c.Name)
	}
	sort.Slice(out.Mounts, func(i, j int) bool { return out.Mounts[i].ContainerPath < out.Mounts[j].ContainerPath })
	sort.Slice(out.Devices, func(i, j int) bool { return out.Devices[i].ContainerPath < out.Devices[j].ContainerPath })
	sort.Strings(out.CDIDevices)
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
