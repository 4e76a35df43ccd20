package main

import (
	"github.com/gatectl/gatectl/server"
	"github.com/gatectl/gatectl/snapshot"
	"github.com/gatectl/gatectl/wasm"
	"github.com/gatectl/gatectl/wasm/snaphook"
	"github.com/hashicorp/go-hclog"
)

// pluginHook makes the WebAssembly host's way into snapshot building: wasm
// classifiers, the plugins directory, wasm scorers and wasm balance sources. One
// hook serves every reload, so unchanged modules keep their compiled form and warm
// instances; the caller closes it (which closes the host) when done. logger is
// the parent logger (the host names itself "wasm"); nil discards. stateDir, when
// set (serve's --state-dir), holds the compilation cache; else the config's
// stateDir does.
func pluginHook(logger hclog.Logger, stateDir string) *snaphook.Hook {
	return snaphook.New(wasm.HostOptions{Logger: logger, CacheDir: wasm.CacheDir(stateDir)})
}

// snapshotOptions are the options every command builds snapshots with: the
// parent logger and the plugin hook.
func snapshotOptions(logger hclog.Logger, hook *snaphook.Hook) snapshot.Options {
	return snapshot.Options{Logger: logger, Hooks: []snapshot.ChainHook{hook}}
}

// The hook is also what serve hands the server for plugin metrics.
var _ server.PluginStats = (*snaphook.Hook)(nil)
