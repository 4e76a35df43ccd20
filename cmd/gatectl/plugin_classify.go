package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/wasm"
)

// pluginClassifiers loads the modules of `gatectl classify --plugin X.wasm`, in
// order, as classifiers with the production limits; they run before the config's
// classifiers. Their host lives as long as the process. timeout, when not zero,
// replaces the production deadline of one call (--plugin-timeout).
func pluginClassifiers(paths []string, timeout time.Duration) ([]engine.Classifier, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	host, err := wasm.NewHost(wasm.HostOptions{})
	if err != nil {
		return nil, err
	}
	links := make([]engine.Classifier, 0, len(paths))
	for _, p := range paths {
		c, err := wasm.NewClassifier(context.Background(), host, p, wasm.ClassifierOptions{Limits: wasm.Limits{Timeout: timeout}})
		if err != nil {
			host.Close(context.Background())
			return nil, fmt.Errorf("--plugin %s: %w", p, err)
		}
		links = append(links, c)
	}
	return links, nil
}
