package verbs

import (
	"errors"
	"fmt"

	"github.com/emunic/emunic/rings"
)

// Extension names a provider function a caller retrieves by query before
// it relies on it, as the Windows Sockets switch asks a SAN service
// provider for each extension function's entry point (WSPIoctl with
// SIO_GET_EXTENSION_FUNCTION_POINTER and the function's GUID). Every one
// is required but ExtRdmaRead and ExtMemoryRegistrationCacheCallback.
type Extension uint8

// Extensions, the SAN SPI extension functions' names.
const (
	ExtRegisterMemory Extension = iota + 1
	ExtDeregisterMemory
	ExtRegisterRdmaMemory
	ExtDeregisterRdmaMemory
	ExtRdmaWrite
	ExtRdmaRead                        // optional
	ExtMemoryRegistrationCacheCallback // optional: Buffer.Free invalidates the provider's RegCaches
	numExtensions
)

var extensionNames = [numExtensions]string{"", "WSPRegisterMemory", "WSPDeregisterMemory", "WSPRegisterRdmaMemory",
	"WSPDeregisterRdmaMemory", "WSPRdmaWrite", "WSPRdmaRead", "WSPMemoryRegistrationCacheCallback"}

func (e Extension) String() string {
	if e > 0 && e < numExtensions {
		return extensionNames[e]
	}
	return fmt.Sprintf("extension(%d)", uint8(e))
}

// ErrOpNotSupported is the provider's answer for an extension it does not
// have (WSAEOPNOTSUPP).
var ErrOpNotSupported = errors.New("verbs: operation not supported by the provider (WSAEOPNOTSUPP)")

// GetExtension says whether the provider has extension e: nil, or an error
// wrapping ErrOpNotSupported.
func (v *Provider) GetExtension(e Extension) error {
	if e == 0 || e >= numExtensions {
		return fmt.Errorf("%w: %v", ErrOpNotSupported, e)
	}
	if v.dropped.Load()&(1<<e) != 0 {
		return fmt.Errorf("%w: %v", ErrOpNotSupported, e)
	}
	return nil
}

// DropExtension takes an optional extension away from the provider, as a
// SAN provider that does not implement it: ExtRdmaRead makes RDMA Read
// work requests fail to post (ErrOpNotSupported), and
// ExtMemoryRegistrationCacheCallback stops Buffer.Free from invalidating
// the provider's registration caches (their users invalidate what they
// free themselves). The required extensions cannot be dropped.
func (v *Provider) DropExtension(e Extension) error {
	if e != ExtRdmaRead && e != ExtMemoryRegistrationCacheCallback {
		return fmt.Errorf("verbs: %v is required", e)
	}
	for {
		old := v.dropped.Load()
		if v.dropped.CompareAndSwap(old, old|1<<e) {
			return nil
		}
	}
}

// checkExtension refuses a send work request whose operation the
// provider dropped.
func (v *Provider) checkExtension(w *rings.SendWR) error {
	if w.Opcode == rings.WRRDMARead && v.dropped.Load()&(1<<ExtRdmaRead) != 0 {
		return fmt.Errorf("%w: RDMA Read", ErrOpNotSupported)
	}
	return nil
}
