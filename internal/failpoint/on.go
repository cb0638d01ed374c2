//go:build failpoints

// Package failpoint marks the steps of multi-step operations where a test
// build can kill the process, to prove every crash point is recoverable.
package failpoint

import (
	"cmp"
	"os"
	"syscall"
)

// EnvVar names the failpoint at which a test build kills itself.
const EnvVar = "NETNS_PIN_FAILPOINT"

// Hit sends SIGKILL to the process when name is the armed failpoint, the
// same as a node losing the plugin process mid-operation.
func Hit(name string) {
	if os.Getenv(EnvVar) == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// BootIDEnvVar, in test builds, names a file read instead of the kernel's
// boot id: writing a new id there simulates a reboot.
const BootIDEnvVar = "NETNS_PIN_BOOT_ID_FILE"

// BootIDPath returns the file named by BootIDEnvVar, else def.
func BootIDPath(def string) string { return cmp.Or(os.Getenv(BootIDEnvVar), def) }

// RegistryDirEnvVar, in test builds, names the store registry folder used
// instead of the node's, so that tests running at once do not share it.
const RegistryDirEnvVar = "NETNS_PIN_REGISTRY_DIR"

// RegistryDir returns the folder named by RegistryDirEnvVar, else def.
func RegistryDir(def string) string { return cmp.Or(os.Getenv(RegistryDirEnvVar), def) }
