package main

import (
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/wasm"
	"github.com/gatectl/gatectl/wasm/snaphook"
	"github.com/hashicorp/go-hclog"
)

// snapshotHooks plug the WebAssembly host into snapshot building: wasm
// classifiers, the plugins directory and wasm scorers. One hook serves every
// reload, so unchanged modules keep their compiled form and warm instances.
func snapshotHooks(logger hclog.Logger) []snapshot.ChainHook {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return []snapshot.ChainHook{snaphook.New(wasm.HostOptions{Logger: logger})}
}
