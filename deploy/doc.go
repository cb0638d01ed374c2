// Package deploy holds netns-pin's Kubernetes manifests (*.yaml) and the
// installer image's Containerfile, and a reader of the manifests for the
// suites that check and apply them (Objects). Its test parses every
// manifest and runs the CNI configurations they carry through the plugin's
// own validation (conf.PluginEntry, conf.Parse), the way Multus hands them
// to netns-pin. docs/operating.md explains how to use them.
package deploy
