package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	defaultDeviceDir = "/var/lib/kubelet/device-plugins"
	inNamespaceEnv   = "DEVICEMANAGER_HARNESS_IN_MOUNT_NS"
)

// maybeReexecInMountNamespace runs this program again in a new mount namespace when deviceDir is
// not the kubelet's hard-coded directory. The parent forwards signals and returns the child's exit
// code with reexeced=true; the child (and a harness using the real path) gets reexeced=false.
//
// Why a re-exec and not unshare(2): a Go program is multi-threaded from the start, and
// unshare(CLONE_NEWNS) needs an unshared fs struct, so it fails with EINVAL there.
func maybeReexecInMountNamespace(deviceDir string) (int, bool, error) {
	dir, err := filepath.Abs(deviceDir)
	if err != nil {
		return 0, false, err
	}
	if dir == defaultDeviceDir {
		return 0, false, os.MkdirAll(dir, 0o755)
	}
	if os.Getenv(inNamespaceEnv) == "1" {
		return 0, false, bindOverDefault(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, false, err
	}

	// Pdeathsig is tied to the creating thread; keep this goroutine on it so the child dies with us.
	runtime.LockOSThread()
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), inNamespaceEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := cmd.Start(); err != nil {
		return 0, false, fmt.Errorf("starting in a new mount namespace (needs root or CAP_SYS_ADMIN): %w", err)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if exitErr, ok := err.(*exec.ExitError); ok {
		return exitErr.ExitCode(), true, nil
	}
	if err != nil {
		return 1, true, err
	}
	return 0, true, nil
}

// bindOverDefault makes the mount namespace private (so nothing leaks back to the host) and puts
// dir over the hard-coded device-plugin directory.
func bindOverDefault(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := os.MkdirAll(defaultDeviceDir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dir, defaultDeviceDir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s over %s: %w", dir, defaultDeviceDir, err)
	}
	return nil
}
