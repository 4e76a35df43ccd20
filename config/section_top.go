package config

import (
	"net"
	"strconv"

	"gopkg.in/yaml.v3"
)

// topSchema is the top level of the file.
var topSchema = &schema[Config]{
	path:     "(top level)",
	doc:      "the keys of the file itself",
	defaults: func() Config { return *base() },
	fields: []setting[Config]{
		strField("listen", "host:port the daemon listens on; read at start, a reload does not change it (`serve --listen` overrides it)", checkListen,
			func(c *Config) *string { return &c.Listen }),
		subField("server", "client connections: the cap and the timeouts", serverSchema,
			func(c *Config) *Server { return &c.Server }),
		subField("upstream", "deadlines of one attempt on an upstream", upstreamSchema,
			func(c *Config) *Upstream { return &c.Upstream }),
		subField("api", "the decision API and the console: token and event-stream cap", apiSchema,
			func(c *Config) *API { return &c.API }),
		strField("stateDir", "directory of the state file and the wasm compilation cache (relative: to the config file's directory); read at start, a reload does not change it (`serve --state-dir` overrides it for both; a cache directory that cannot be made is a warning, and modules compile in memory)", nil,
			func(c *Config) *string { return &c.StateDir }),
		subField("log", "the root logger", logSchema,
			func(c *Config) *Log { return &c.Log }),
		customField("providers", "mapping", "name -> upstream; replaces the embedded default's well-known providers",
			func(v *validator, n *yaml.Node, path string, c *Config) { v.providers(n, path) }),
		subField("gate", "admission against per-model budgets", gateSchema,
			func(c *Config) *Gate { return &c.Gate }),
		subField("retry", "the retry planner", retrySchema,
			func(c *Config) *Retry { return &c.Retry }),
		subField("store", "where the gate's shared state lives (Redis, for several instances)", storeSchema,
			func(c *Config) *Store { return &c.Store }),
		customField("classifiers", "list", "the classifier chain, in order; the built-in rules always decide last",
			func(v *validator, n *yaml.Node, path string, c *Config) { v.classifiers(n, path) }),
		strField("pluginsDir", "every *.wasm dropped here joins the classifier chain", nil,
			func(c *Config) *string { return &c.PluginsDir }),
		subField("pluginLimits", "bounds of every module dropped into pluginsDir (a classifiers[] entry has its own limits)", dirPluginLimitsSchema,
			func(c *Config) *PluginLimits { return &c.PluginLimits }),
		customField("pools", "mapping", "name -> pool of interchangeable routes",
			func(v *validator, n *yaml.Node, path string, c *Config) { v.pools(n, path) }),
		customField("models", "mapping", "model names clients send -> a pool, provider/model, or provider/* (the name as sent); a key holding * is a pattern. Absent: the embedded default's aliases whose providers the file configures",
			func(v *validator, n *yaml.Node, path string, c *Config) { v.aliases(n, path) }),
		customField("balances", "list", "balance sources, at most one per provider",
			func(v *validator, n *yaml.Node, path string, c *Config) { v.balances(n, path) }),
		subField("quota", "what a QUOTA failure does", quotaSchema,
			func(c *Config) *Quota { return &c.Quota }),
		subField("proxy", "what a held client sees: SSE comments for a stream, a cap for the rest", proxySchema,
			func(c *Config) *Proxy { return &c.Proxy }),
	},
}

var logSchema = &schema[Log]{
	path:     "log",
	doc:      "the root logger",
	defaults: func() Log { return base().Log },
	fields: []setting[Log]{
		choiceField("level", "lowest level logged; a reload changes it", LogLevels, func(l *Log) *string { return &l.Level }),
		choiceField("format", "line format; read at start, a reload does not change it", LogFormats, func(l *Log) *string { return &l.Format }),
		boolField("access", "one info line per proxied call: method, path, face, model as sent, route, status, attempts, gate wait, upstream and total time, tokens, session; never keys or bodies",
			func(l *Log) *bool { return &l.Access }),
	},
}

func checkListen(l string) string {
	_, port, err := net.SplitHostPort(l)
	if err != nil {
		return "must be host:port, such as 127.0.0.1:7878"
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "port must be a number from 0 to 65535"
	}
	return ""
}
