package sameorigin

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

func TestCheckRedirect(t *testing.T) {
	first := &http.Request{URL: &url.URL{Scheme: "https", Host: "api.example.com", Path: "/v1", RawQuery: "token=q"}}
	next := func(u string) *http.Request {
		pu, _ := url.Parse(u)
		return &http.Request{URL: pu, Header: http.Header{"Referer": {first.URL.String()}}}
	}
	same := next("https://api.example.com/v2")
	if err := CheckRedirect(same, []*http.Request{first}); err != nil || same.Header.Get("Referer") != "" {
		t.Errorf("same origin: %v, Referer %q; want followed without the Referer", err, same.Header.Get("Referer"))
	}
	for _, u := range []string{"https://evil.example.net/v1", "http://api.example.com/v1", "https://api.example.com:8443/v1"} {
		if err := CheckRedirect(next(u), []*http.Request{first}); !errors.Is(err, http.ErrUseLastResponse) {
			t.Errorf("%s: %v, want the redirect answered, not followed", u, err)
		}
	}
	via := make([]*http.Request, 10)
	for i := range via {
		via[i] = first
	}
	if err := CheckRedirect(next("https://api.example.com/v3"), via); err == nil || errors.Is(err, http.ErrUseLastResponse) {
		t.Errorf("the 11th redirect: %v, want an error", err)
	}
}
