package config

import "gopkg.in/yaml.v3"

// API configures the decision API (/gate/v1/) and the console (/ui): who may call
// them and how many event streams may be open. The daemon reads it when it
// starts; a reload does not change it.
type API struct {
	// TokenEnv names the environment variable holding the API token. When it is
	// set and non-empty, every request to /gate/v1/* and /ui must carry the token
	// (Authorization: Bearer, X-Gate-Token, or the gatectl_token cookie). The
	// daemon refuses to listen beyond loopback without one.
	TokenEnv string
	// MaxSubscribers caps the open event streams (/gate/v1/events); past it a new
	// one is answered 503 with Retry-After.
	MaxSubscribers int
}

// DefaultMaxSubscribers is api.maxSubscribers' default.
const DefaultMaxSubscribers = 256

// apiSchema is api:.
var apiSchema = &schema[API]{
	path:     "api",
	doc:      "the decision API and the console: the token that guards them and the event-stream cap; read at start, a reload does not change them",
	defaults: func() API { return base().API },
	fields: []setting[API]{
		customField("tokenEnv", "string", "environment variable holding the API token; when set and non-empty, /gate/v1/* and /ui need it (Authorization: Bearer, X-Gate-Token or cookie gatectl_token). Without a token the daemon listens only on loopback",
			func(v *validator, n *yaml.Node, path string, a *API) { a.TokenEnv = v.envName(n, path) }),
		intField("maxSubscribers", "event streams (/gate/v1/events) open at once; past it a new one gets 503 with Retry-After", atLeast(1),
			func(a *API) *int { return &a.MaxSubscribers }),
	},
}
