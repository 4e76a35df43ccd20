package config

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// providerSchema is one entry of providers:.
var providerSchema = &schema[Provider]{
	path:     "providers.<name>",
	doc:      "one upstream",
	defaults: func() Provider { return Provider{} },
	fields: []setting[Provider]{
		choiceField("kind", "the API the upstream speaks", ProviderKinds,
			func(p *Provider) *string { return &p.Kind }).req(""),
		customField("baseURL", "string", "absolute http(s) URL of the API; a trailing / is dropped",
			func(v *validator, n *yaml.Node, path string, p *Provider) {
				if u := v.url(n, path); u != "" {
					p.BaseURL = strings.TrimRight(u, "/")
				}
			}).req(""),
		customField("apiKeyEnv", "string", "environment variable holding the key; absent: the client's key is passed through",
			func(v *validator, n *yaml.Node, path string, p *Provider) { p.APIKeyEnv = v.envName(n, path) }),
		customField("headers", "mapping", "extra request headers; a credential must be written as ${NAME}",
			func(v *validator, n *yaml.Node, path string, p *Provider) { p.Headers = v.headers(n, path) }),
		customField("streamUsage", "boolean", "true: a chat or completions stream (openai kind) is asked for its usage (stream_options.include_usage), which the gate settles with and the client does not see unless it asked; false for an upstream that refuses the parameter (\"Unrecognized request argument supplied: stream_options\": Azure OpenAI before api-version 2024-09-01-preview): no stream_options goes, the client's own neither, and such streams settle on the input gatectl estimated and a token per chunk, their output kept at its reserve in an output window (a Responses stream reports its usage either way)",
			func(v *validator, n *yaml.Node, path string, p *Provider) {
				if b, ok := v.boolean(n, path); ok {
					p.NoStreamUsage = !b
				}
			}).shownBy(func(p *Provider) string { return strconv.FormatBool(!p.NoStreamUsage) }),
	},
}

func (v *validator) providers(n *yaml.Node, path string) {
	v.providersSet = true
	v.c.Providers = map[string]Provider{}
	for _, f := range v.entries(n, path) {
		name := f.key.Value
		p := join(path, name)
		if !providerNameRe.MatchString(name) {
			v.errorf(f.key, p, "provider name %q must start with a letter or digit and hold only letters, digits, '.', '_' and '-' (no '/': routes write provider/model)", name)
		}
		if isNull(f.val) {
			v.errorf(f.key, p, "needs kind and baseURL")
			continue
		}
		prov := providerSchema.defaults()
		providerSchema.decode(v, f.val, p, &prov)
		if prov.NoStreamUsage && prov.Kind == "anthropic" {
			v.warnf(f.val, join(p, "streamUsage"), "has no effect on an anthropic provider: its streams report their usage unasked")
		}
		v.c.Providers[name] = prov
	}
}

// url decodes an absolute http(s) URL; "" when it is not one (reported).
func (v *validator) url(n *yaml.Node, path string) string {
	u, ok := v.nonEmpty(n, path)
	if !ok {
		return ""
	}
	if msg := checkURL(u); msg != "" {
		v.errorf(n, path, "%s (got %q)", msg, u)
		return ""
	}
	return u
}

func checkURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an absolute http:// or https:// URL"
	}
	return ""
}

// envName decodes the name of an environment variable. The value is never echoed:
// a user who pasted the key itself here must not see it in logs.
func (v *validator) envName(n *yaml.Node, path string) string {
	s, ok := v.str(n, path)
	if !ok {
		return ""
	}
	if !envNameRe.MatchString(s) {
		v.errorf(n, path, "must name an environment variable (letters, digits and '_', not starting with a digit), never hold the key itself")
		return ""
	}
	return s
}

// secretHeaders carry credentials; their values must come from the environment.
var secretHeaders = []string{"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}

var envRefRe = regexp.MustCompile(`\$\{([^}]*)\}`)

// headers decodes request headers. A credential header must reference the
// environment (${NAME}) rather than hold a literal secret; values are never echoed.
func (v *validator) headers(n *yaml.Node, path string) map[string]string {
	h := v.strMap(n, path)
	for _, f := range v.entriesQuiet(n) {
		k := f.key.Value
		p := join(path, k)
		if !headerNameRe.MatchString(k) {
			v.errorf(f.key, p, "%q is not a valid header name", k)
			delete(h, k)
			continue
		}
		val, ok := h[k]
		if !ok {
			continue
		}
		if contains(secretHeaders, strings.ToLower(k)) && !strings.Contains(val, "${") {
			v.errorf(f.val, p, "holds a literal credential: reference an environment variable instead (%s: \"Bearer ${MY_KEY}\"), or use apiKeyEnv", k)
			delete(h, k)
		}
		for _, ref := range envRefRe.FindAllStringSubmatch(val, -1) {
			if !envNameRe.MatchString(ref[1]) {
				v.errorf(f.val, p, "${%s} is not a valid environment variable name", ref[1])
			}
		}
	}
	return h
}

// entriesQuiet lists a mapping's pairs without reporting anything (strMap did).
func (v *validator) entriesQuiet(n *yaml.Node) []field {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	quiet := &decoder{file: v.file}
	return quiet.pairs(n, "")
}
