package config

import (
	"testing"
	"time"
)

func TestStoreRedis(t *testing.T) {
	c, err := Parse([]byte("store:\n  redis:\n    url: redis://127.0.0.1:6379/0\n    onError: failClosed\n"), "gatectl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Store.Redis
	if r == nil || r.URL != "redis://127.0.0.1:6379/0" || r.OnError != "failClosed" || r.KeyPrefix != "gatectl:" || r.Timeout != 100*time.Millisecond {
		t.Fatalf("store.redis = %+v, want the url and policy given and the defaults for the rest", r)
	}
	if c, _ := Parse([]byte("listen: 127.0.0.1:7878\n"), "gatectl.yaml"); c.Store.Redis != nil {
		t.Fatal("a config without store.redis has one")
	}
	for _, tc := range []errCase{
		{"no url", "store:\n  redis:\n    keyPrefix: x\n", []string{"3: store.redis.url: is required"}},
		{"bad scheme", "store:\n  redis:\n    url: http://x\n", []string{"3: store.redis.url: must start with redis://"}},
		{"bad policy", "store:\n  redis:\n    url: redis://x:1\n    onError: ignore\n", []string{"4: store.redis.onError:"}},
		{"brace in keyPrefix", "store:\n  redis:\n    url: redis://x:1\n    keyPrefix: \"app{1}:\"\n", []string{"4: store.redis.keyPrefix: must not contain any of"}},
		{"glob in keyPrefix", "store:\n  redis:\n    url: redis://x:1\n    keyPrefix: \"app*\"\n", []string{"4: store.redis.keyPrefix: must not contain any of"}},
		{"bad timeout", "store:\n  redis:\n    url: redis://x:1\n    timeout: 0s\n", []string{"4: store.redis.timeout:"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrs(t, tc.src, tc.want) })
	}
}
