// Package conf parses and validates the netns-pin entry of a CNI
// configuration and decides which pods are holders of which Ceph cluster.
package conf

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/netns-pin/netns-pin/inuse"
)

// Defaults of docs/design.md §3. The pin directory sits under the kubelet's plugins
// directory because csi node plugins already mount that path with
// Bidirectional propagation, so pins made there are visible to them.
const (
	DefaultPinDir       = "/var/lib/kubelet/plugins/netns-pin"
	DefaultStateDir     = "/var/lib/cni/netns-pin"
	DefaultLink         = "{{.Namespace}}/{{.Name}}.net"
	DefaultSysfs        = inuse.DefaultSysfs
	DefaultDebugfs      = inuse.DefaultDebugfs
	DefaultProc         = inuse.DefaultProc
	DefaultCephPorts    = inuse.DefaultCephPorts
	DefaultUnattributed = string(inuse.PolicyBlock)
	DefaultLogLevel     = "info"

	// MaxConfigSize bounds the configuration read from stdin.
	MaxConfigSize = 1 << 20
)

// defaultCacheDirs are where libcni result caches live: a runtime's own
// (containerd, CRI-O, cnitool) and Multus's for its delegates
// (pkg/multus: CNIDir).
var defaultCacheDirs = []string{"/var/lib/cni", "/var/lib/cni/multus"}

// Config is the plugin's entry in a conflist, after defaults. The json
// tags name the keys (docs/design.md §3); see decode.
type Config struct {
	types.PluginConf

	PinDir            string       `json:"pinDir,omitempty"`
	StateDir          string       `json:"stateDir,omitempty"`
	Links             []string     `json:"links,omitempty"`
	Holders           []HolderRule `json:"holders,omitempty"`
	CNIArgsNamespaces []string     `json:"cniArgsNamespaces,omitempty"`
	InUse             InUse        `json:"inUse"`
	CacheDirs         []string     `json:"cacheDirs,omitempty"`
	LogFile           string       `json:"logFile,omitempty"`
	LogLevel          string       `json:"logLevel,omitempty"`

	// Args carries args.cni.pinCluster, which Multus fills from the
	// cni-args of a pod's network selection element.
	Args *Args `json:"args,omitempty"`

	// prevResult is the entry's "prevResult" as given, and prevResults
	// how many keys the library reads as prevResult (of any case).
	prevResult  []byte
	prevResults int

	links     []linkTemplate
	rules     []compiledRule
	cephPorts inuse.Ports
	policy    inuse.Policy
}

// Args is the "args" member of a plugin configuration (CNI spec, args.cni).
type Args struct {
	CNI struct {
		PinCluster string `json:"pinCluster,omitempty"`
	} `json:"cni"`
}

// InUse configures where the in-use check reads kernel state and how it
// treats Ceph clients it cannot attribute to one netns.
type InUse struct {
	Sysfs        string `json:"sysfs,omitempty"`
	Debugfs      string `json:"debugfs,omitempty"`
	Proc         string `json:"proc,omitempty"`
	CephPorts    string `json:"cephPorts,omitempty"`
	Unattributed string `json:"unattributed,omitempty"`
}

// Parse decodes stdin data, applies defaults and validates every field.
// Errors name the field and the offending value.
func Parse(data []byte) (*Config, error) { return ParseWith(data, nil) }

// ParseWith is Parse with some path settings given from elsewhere (an
// operator's flags), keyed by PathSetting.Key. They replace the
// configuration's values before defaults and validation, so a flag is
// held to the same rules as the field it stands for.
func ParseWith(data []byte, overrides map[string]string) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("configuration is %d bytes, over the %d byte limit", len(data), MaxConfigSize)
	}
	c := &Config{}
	if err := c.decode(data); err != nil {
		return nil, fmt.Errorf("parse configuration: %w", err)
	}
	for _, ps := range PathSettings {
		if v := overrides[ps.Key]; v != "" {
			*ps.Field(c) = v
		}
	}
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// PrevResultAsGiven is the prevResult member as the runtime wrote it, when
// it can be handed on unchanged: given once, under that name, and in the
// configuration's cniVersion, which is how runtimes pass it. Otherwise nil,
// and the CNI library is to decode and convert it (ParsePrevResult).
// netns-pin never changes a result, so a pod's ADD prints what it was
// given without decoding it: fields this CNI library does not know
// survive, and a pod that is no holder pays for no more than it uses.
func (c *Config) PrevResultAsGiven() []byte {
	if c.prevResults != 1 || c.prevResult == nil || c.CNIVersion == "" {
		return nil
	}
	// Its version as the library reads it, from the decoded prevResult:
	// exactly that key, and no other spelling of it.
	for k, v := range c.RawPrevResult {
		if strings.EqualFold(k, "cniVersion") && (k != "cniVersion" || v != c.CNIVersion) {
			return nil
		}
	}
	if _, ok := c.RawPrevResult["cniVersion"]; !ok {
		return nil
	}
	return c.prevResult
}

// ParsePrevResult decodes prevResult with the CNI library, for a result
// that PrevResultAsGiven cannot hand on.
func (c *Config) ParsePrevResult() error {
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return fmt.Errorf("parse prevResult: %w", err)
	}
	return nil
}

// PathSetting is one of the path settings that the operator's command line
// can give as a flag, and that a refusal message repeats so that the
// command it suggests finds the same pins and kernel files.
type PathSetting struct {
	Flag    string // command-line flag, without "--"
	Key     string // key in the configuration (dotted below inUse)
	Default string
	Field   func(*Config) *string
}

// PathSettings is every path setting, in the order flags are printed.
var PathSettings = []PathSetting{
	{"pin-dir", "pinDir", DefaultPinDir, func(c *Config) *string { return &c.PinDir }},
	{"state-dir", "stateDir", DefaultStateDir, func(c *Config) *string { return &c.StateDir }},
	{"sysfs", "inUse.sysfs", DefaultSysfs, func(c *Config) *string { return &c.InUse.Sysfs }},
	{"debugfs", "inUse.debugfs", DefaultDebugfs, func(c *Config) *string { return &c.InUse.Debugfs }},
	{"proc", "inUse.proc", DefaultProc, func(c *Config) *string { return &c.InUse.Proc }},
}

// Flags returns the command-line flags that select c's non-default path
// settings, e.g. " --pin-dir /srv/pins".
func (c *Config) Flags() string {
	var b strings.Builder
	for _, ps := range PathSettings {
		if v := *ps.Field(c); v != ps.Default {
			b.WriteString(" --" + ps.Flag + " " + v)
		}
	}
	return b.String()
}

// InUseCommand is the operator command that lists what uses the pin of
// attachment, with the flags that find this configuration's store and
// kernel files.
func (c *Config) InUseCommand(attachment string) string {
	return "netns-pinctl" + c.Flags() + " inuse " + attachment
}

func (c *Config) applyDefaults() {
	c.PinDir = cmp.Or(c.PinDir, DefaultPinDir)
	c.StateDir = cmp.Or(c.StateDir, DefaultStateDir)
	// A missing (or null) links is the default link; an empty list is no
	// link at all: a holder nothing reaches by path, such as a CSI node
	// plugin that makes its kernel clients in its own netns
	// (docs/design.md §3). The decoder keeps the two apart: "[]" gives an
	// empty, non-nil list.
	if c.Links == nil {
		c.Links = []string{DefaultLink}
	}
	if len(c.CacheDirs) == 0 {
		c.CacheDirs = slices.Clone(defaultCacheDirs)
	}
	c.InUse.Sysfs = cmp.Or(c.InUse.Sysfs, DefaultSysfs)
	c.InUse.Debugfs = cmp.Or(c.InUse.Debugfs, DefaultDebugfs)
	c.InUse.Proc = cmp.Or(c.InUse.Proc, DefaultProc)
	c.InUse.CephPorts = cmp.Or(c.InUse.CephPorts, DefaultCephPorts)
	c.InUse.Unattributed = cmp.Or(c.InUse.Unattributed, DefaultUnattributed)
	c.LogLevel = cmp.Or(c.LogLevel, DefaultLogLevel)
}

// cleanPaths requires each path setting whose key starts with prefix to be
// absolute, and cleans it.
func (c *Config) cleanPaths(prefix string) error {
	for _, ps := range PathSettings {
		if !strings.HasPrefix(ps.Key, prefix) {
			continue
		}
		p := ps.Field(c)
		clean, err := absPath(*p)
		if err != nil {
			return fmt.Errorf("%s %q: %w", ps.Key, *p, err)
		}
		*p = clean
	}
	return nil
}

func (c *Config) validate() error {
	if err := c.cleanPaths(""); err != nil {
		return err
	}
	for i, d := range c.CacheDirs {
		clean, err := absPath(d)
		if err != nil {
			return fmt.Errorf("cacheDirs[%d] %q: %w", i, d, err)
		}
		c.CacheDirs[i] = clean
	}
	if c.LogFile != "" {
		clean, err := absPath(c.LogFile)
		if err != nil {
			return fmt.Errorf("logFile %q: %w", c.LogFile, err)
		}
		c.LogFile = clean
	}
	if within(c.StateDir, c.PinDir) || within(c.PinDir, c.StateDir) {
		return fmt.Errorf("pinDir %q and stateDir %q must not contain one another", c.PinDir, c.StateDir)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("logLevel %q: want debug, info, warn or error", c.LogLevel)
	}
	var err error
	if c.policy, c.cephPorts, err = c.InUse.parse(); err != nil {
		return err
	}
	c.links = make([]linkTemplate, 0, len(c.Links))
	for i, l := range c.Links {
		lt, err := compileLink(c.PinDir, l)
		if err != nil {
			return fmt.Errorf("links[%d] %q: %w", i, l, err)
		}
		c.links = append(c.links, lt)
	}
	c.rules = make([]compiledRule, 0, len(c.Holders))
	for i, r := range c.Holders {
		cr, err := compileRule(r)
		if err != nil {
			return fmt.Errorf("holders[%d]: %w", i, err)
		}
		c.rules = append(c.rules, cr)
	}
	for i, ns := range c.CNIArgsNamespaces {
		if err := validateLabel(ns); err != nil {
			return fmt.Errorf("cniArgsNamespaces[%d] %q: %w", i, ns, err)
		}
	}
	return nil
}

// absPath requires an absolute path and returns it cleaned.
func absPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("must be an absolute path")
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("contains a NUL byte")
	}
	return filepath.Clean(p), nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// InUseOptions is the in-use check's configuration.
func (c *Config) InUseOptions() inuse.Options {
	return inuse.Options{Sysfs: c.InUse.Sysfs, Debugfs: c.InUse.Debugfs, Proc: c.InUse.Proc, CephPorts: c.cephPorts, Unattributed: c.policy}
}

func (u InUse) parse() (policy inuse.Policy, ports inuse.Ports, err error) {
	if policy, err = inuse.ParsePolicy(u.Unattributed); err != nil {
		return policy, ports, fmt.Errorf("inUse.unattributed: %w", err)
	}
	if ports, err = inuse.ParsePorts(u.CephPorts); err != nil {
		return policy, ports, fmt.Errorf("inUse.cephPorts %q: %w", u.CephPorts, err)
	}
	return policy, ports, nil
}

// InUseSettings is what c's in-use check looks at and how it decides,
// as recorded with each pin (docs/design.md §15.6): a release also checks
// with the settings a pin was made with, so that a command run with other
// roots or another policy cannot find a used netns unused. Their keys are
// the json tags of InUse, the configuration's own.
func (c *Config) InUseSettings() map[string]string {
	m := map[string]string{}
	for key, f := range c.InUse.fields() {
		m[key] = *f
	}
	return m
}

// fields are u's fields by their json tags.
func (u *InUse) fields() map[string]*string {
	return map[string]*string{"sysfs": &u.Sysfs, "debugfs": &u.Debugfs, "proc": &u.Proc, "cephPorts": &u.CephPorts, "unattributed": &u.Unattributed}
}

// inUseOf is recorded settings as the configuration's InUse; a key that is
// none of its json tags is an error.
func inUseOf(settings map[string]string) (InUse, error) {
	var u InUse
	fields := u.fields()
	for k, v := range settings {
		f, ok := fields[k]
		if !ok {
			return u, fmt.Errorf("in-use settings: unknown key %.32q", k)
		}
		*f = v
	}
	return u, nil
}

// InUseCovers reports whether a check with the settings own finds every
// reference that one with recorded finds, so that the second need not run:
// they are the same but for unattributed, "block" in own and "ignore" in
// recorded ("block" adds references, never removes one). This is what an
// operator does who follows the advice of an unreadable debugfs under
// "ignore": the pins made before must not stay blocked by the old check.
func InUseCovers(own, recorded map[string]string) bool {
	o, oerr := inUseOf(own)
	r, rerr := inUseOf(recorded)
	if oerr != nil || rerr != nil || o.Unattributed != string(inuse.PolicyBlock) || r.Unattributed != "ignore" {
		return false
	}
	o.Unattributed = r.Unattributed
	return o == r
}

// InUseOptionsOf is the in-use check's configuration from recorded
// InUseSettings, validated as the configuration was.
func InUseOptionsOf(settings map[string]string) (inuse.Options, error) {
	u, err := inUseOf(settings)
	if err != nil {
		return inuse.Options{}, err
	}
	c := &Config{InUse: u}
	if err := c.cleanPaths("inUse."); err != nil {
		return inuse.Options{}, err
	}
	if c.policy, c.cephPorts, err = c.InUse.parse(); err != nil {
		return inuse.Options{}, err
	}
	return c.InUseOptions(), nil
}
