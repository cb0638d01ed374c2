// Package deploy holds netns-pin's Kubernetes manifests (*.yaml), the Helm
// chart they are rendered from (chart/netns-pin; Render, make manifests)
// and a reader of the manifests for the suites that check and apply them
// (Objects). The chart's tests run the helm binary of make tools: its
// templates with the default and the example values, its schema, its
// package (make chart). Its tests parse every manifest and run the CNI configurations
// they carry through the plugin's own validation (conf.PluginEntry,
// conf.Parse), the way Multus hands them to netns-pin, and build the
// installer image (make image, hack/image.sh) twice to check it is
// reproducible and what skopeo reads. docs/operating.md explains how to
// use them.
package deploy
