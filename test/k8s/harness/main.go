// Command devicemanager-harness runs the kubelet's real device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) outside a kubelet, so that the Python device
// plugins are tested against the code that production kubelets run, not against a re-implementation.
//
// It offers a small JSON-over-HTTP control API on a unix socket (see api.go), optionally serves
// podresources v1 from the same state, and optionally publishes the registered capacity to a Node
// object, as the kubelet's node-status setter does.
//
// The device manager hard-codes /var/lib/kubelet/device-plugins/kubelet.sock. With
// -device-plugin-dir set to another directory, the harness re-executes itself in a private mount
// namespace where that directory is bind-mounted over the hard-coded path: plugins outside use the
// directory as is, the manager inside sees its usual path, and several harnesses can run at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
)

type options struct {
	deviceDir          string
	controlSocket      string
	podResourcesSocket string
	kubeconfig         string
	nodeName           string
	syncPeriod         time.Duration
}

func main() {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.deviceDir, "device-plugin-dir", defaultDeviceDir,
		"directory the plugins see; bind-mounted over "+defaultDeviceDir+" in a private mount namespace when different")
	flag.StringVar(&o.controlSocket, "control-socket", "", "unix socket for the JSON control API (required)")
	flag.StringVar(&o.podResourcesSocket, "podresources-socket", "", "unix socket to serve podresources v1 on (optional)")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for publishing node capacity (optional)")
	flag.StringVar(&o.nodeName, "node-name", "", "Node object to publish capacity to (with -kubeconfig)")
	flag.DurationVar(&o.syncPeriod, "node-sync-period", 2*time.Second,
		"how often capacity is re-read (this also expires stopped endpoints) and published")
	flag.Parse()

	if o.controlSocket == "" {
		fmt.Fprintln(os.Stderr, "-control-socket is required")
		os.Exit(2)
	}
	if o.kubeconfig != "" && o.nodeName == "" {
		fmt.Fprintln(os.Stderr, "-node-name is required with -kubeconfig")
		os.Exit(2)
	}

	if code, reexeced, err := maybeReexecInMountNamespace(o.deviceDir); err != nil {
		fmt.Fprintln(os.Stderr, "mount namespace:", err)
		os.Exit(1)
	} else if reexeced {
		os.Exit(code)
	}

	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	logger := klog.FromContext(ctx)

	h, err := newHarness(logger)
	if err != nil {
		return err
	}
	defer h.stop(logger)

	var pub *publisher
	if o.kubeconfig != "" {
		pub, err = newPublisher(o.kubeconfig, o.nodeName)
		if err != nil {
			return err
		}
	}

	if o.podResourcesSocket != "" {
		lis, err := listenUnix(o.podResourcesSocket)
		if err != nil {
			return err
		}
		srv := grpc.NewServer()
		podresourcesv1.RegisterPodResourcesListerServer(srv, podresources.NewV1PodResourcesServer(ctx, h.providers()))
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
	}

	lis, err := listenUnix(o.controlSocket)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{Handler: newAPI(h, pub), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := httpSrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "control API stopped")
			cancel()
		}
	}()
	defer httpSrv.Close()

	ticker := time.NewTicker(o.syncPeriod)
	defer ticker.Stop()
	fmt.Fprintf(os.Stderr, "harness ready: control=%s device-plugin-dir=%s\n", o.controlSocket, o.deviceDir)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			// Like the kubelet's node-status loop: reading the capacity is also what lets the
			// manager forget resources whose plugin has been gone longer than the grace period.
			capacity, allocatable, removed := h.manager.GetCapacity(logger)
			if pub != nil {
				if err := pub.publish(ctx, capacity, allocatable, removed); err != nil {
					logger.Error(err, "publishing node capacity")
				}
			}
		}
	}
}

// listenUnix removes a stale socket from an earlier run and listens afresh.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}
