package config

import (
	"strings"
	"time"

	"github.com/gatectl/gatectl/store/redisstore"
)

// Store is where the gate keeps the state several gatectl processes share
// (`store:`). Without a redis section the state lives in this process's memory:
// one process, one gate.
type Store struct {
	Redis *redisstore.Options // nil: memory only
}

// storeSchema is store:.
var storeSchema = &schema[Store]{
	path:     "store",
	doc:      "where the gate's shared state lives; without `redis` it is this process's memory. Read at start, a reload does not change it",
	defaults: func() Store { return Store{} },
	fields: []setting[Store]{
		optSubField("redis", "share the gate's windows, cooldowns and learned quotas with every gatectl on this Redis", "needs url", redisSchema,
			func(s *Store) **redisstore.Options { return &s.Redis }),
	},
}

// redisSchema is store.redis.
var redisSchema = &schema[redisstore.Options]{
	path:     "store.redis",
	doc:      "the shared gate on Redis: every gatectl pointed at the same url and keyPrefix admits against one window per model",
	defaults: redisstore.DefaultOptions,
	fields: []setting[redisstore.Options]{
		secretStrField("url", "redis://[user:password@]host:port[/db], or rediss:// for TLS; a password here is never logged", checkRedisURL,
			func(o *redisstore.Options) *string { return &o.URL }).req(""),
		strField("keyPrefix", "prepended to every key and channel; instances share state only under the same prefix. No braces (the keys' hash tag is {provider/model}) nor glob characters (*?[]\\)", redisstore.CheckKeyPrefix,
			func(o *redisstore.Options) *string { return &o.KeyPrefix }),
		durField("timeout", "deadline of every Redis call; past it the call counts as failed and onError decides", positive,
			func(o *redisstore.Options) *time.Duration { return &o.Timeout }),
		boolField("cluster", "connect as a Redis Cluster client: url names one node, more with ?addr=host:port; a model's keys share one hash slot (the {provider/model} tag)",
			func(o *redisstore.Options) *bool { return &o.Cluster }),
		choiceField("onError", "when Redis fails or is slow: failOpen admits with this process's own gate (logged and counted as degraded), failClosed holds calls for 1.5 s, then answers 503", redisstore.Policies,
			func(o *redisstore.Options) *string { return &o.OnError }),
	},
}

func checkRedisURL(u string) string {
	if !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") && !strings.HasPrefix(u, "unix://") {
		return "must start with redis://, rediss:// or unix://"
	}
	return ""
}
