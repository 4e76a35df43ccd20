package config

import (
	"strings"
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
		{"bad scheme hides the password", "store:\n  redis:\n    url: \"REDIS://:s3cretPW@127.0.0.1:16390/0\"\n", []string{"3: store.redis.url: must start with redis://, rediss:// or unix:// (the value is not shown"}},
		{"bad policy", "store:\n  redis:\n    url: redis://x:1\n    onError: ignore\n", []string{"4: store.redis.onError:"}},
		{"brace in keyPrefix", "store:\n  redis:\n    url: redis://x:1\n    keyPrefix: \"app{1}:\"\n", []string{"4: store.redis.keyPrefix: must not contain any of"}},
		{"glob in keyPrefix", "store:\n  redis:\n    url: redis://x:1\n    keyPrefix: \"app*\"\n", []string{"4: store.redis.keyPrefix: must not contain any of"}},
		{"bad timeout", "store:\n  redis:\n    url: redis://x:1\n    timeout: 0s\n", []string{"4: store.redis.timeout:"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrs(t, tc.src, tc.want) })
	}
	if _, err := Parse([]byte("store:\n  redis:\n    url: \"REDIS://:s3cretPW@127.0.0.1:16390/0\"\n"), "gatectl.yaml"); err == nil || strings.Contains(err.Error(), "s3cretPW") {
		t.Errorf("the error quotes the password: %v", err)
	}
}
