package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/lwio/lwfuse"
)

// checkMountPoint refuses a mount point that is not an existing directory.
func checkMountPoint(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mount point %s: not a directory", dir)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("FUSE is not available here: %w (load the fuse module, or run where /dev/fuse exists)", err)
	}
	return nil
}

// lwioUnmountGrace is how long a detached, busy mount is still served
// for the programs that hold it before the command exits anyway (they
// then get ENOTCONN).
var lwioUnmountGrace = 10 * time.Second

// runLWIOMount mounts c's export on cfg.Args[0] until ctx ends (SIGINT,
// SIGTERM) or someone unmounts it, then unmounts: cleanly when nothing
// holds the mount; when a program still has a file open or its working
// directory there, lazily (detached from the tree at once, still served
// to those programs until they leave, lwioUnmountGrace at most).
func runLWIOMount(ctx context.Context, c *lwio.Client, cfg lwioConfig, logger *slog.Logger) error {
	dir := cfg.Args[0]
	srv, err := lwfuse.Mount(dir, c, lwfuse.Options{Name: "lwio:" + cfg.Server.String(), Debug: cfg.Debug,
		UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
	if err != nil {
		return fmt.Errorf("mount %s: %w", dir, err)
	}
	gone := make(chan struct{})
	go func() {
		srv.Wait()
		close(gone)
	}()
	logger.Info(fmt.Sprintf("%s: the export of %s (%s) is mounted; Ctrl-C to unmount", dir, c.ServerName(), cfg.Server),
		"mountpoint", dir, "server", cfg.Server)
	select {
	case <-gone:
		logger.Info("unmounted from outside", "mountpoint", dir)
		return nil
	case <-ctx.Done():
	}
	if err := srv.Unmount(); err != nil {
		logger.Warn(fmt.Sprintf("%s is busy (%v): detaching it; it goes when its last user leaves", dir, err))
		if err := lazyUnmount(dir); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		select {
		case <-gone:
		case <-time.After(lwioUnmountGrace):
			logger.Warn(fmt.Sprintf("%s: still in use after %v; exiting (its users now get ENOTCONN)", dir, lwioUnmountGrace))
			return nil
		}
	}
	logger.Info("unmounted", "mountpoint", dir)
	return nil
}

// lazyUnmount detaches a busy mount: umount2(MNT_DETACH) as root,
// fusermount3 -u -z otherwise.
func lazyUnmount(dir string) error {
	if os.Geteuid() == 0 {
		return unix.Unmount(dir, unix.MNT_DETACH)
	}
	out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u -z: %v: %s", err, out)
	}
	return nil
}
