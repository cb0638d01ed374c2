// Package docs holds netns-pin's documentation (*.md here and the
// repository's README.md) and the test that keeps it honest: every
// relative link and #anchor resolves the way GitHub renders them, the
// README stays short enough to read, and the README's configuration
// examples are the manifests of deploy/ and pass the plugin's own
// validation (conf.PluginEntry, conf.Parse).
package docs
