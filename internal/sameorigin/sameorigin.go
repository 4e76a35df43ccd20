// Package sameorigin is the redirect policy of gatectl's HTTP clients that
// carry a key: the proxy's upstream client and the balance sources.
package sameorigin

import (
	"errors"
	"net/http"
)

// CheckRedirect follows a redirect only to the origin (scheme and host) the
// request was first sent to; any other is answered as its own status
// (http.ErrUseLastResponse). On a redirect net/http keeps every header but
// Authorization and cookies — and keeps even those for another port of the
// same host — so following one elsewhere would hand x-api-key, api-key or a
// key under a configured header to a host it is not meant for. The Referer
// it adds is dropped too: it would carry the first URL's query (a balance
// source's token, an Azure api-version) into the next one's logs. At most
// 10 redirects.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return http.ErrUseLastResponse
	}
	req.Header.Del("Referer")
	return nil
}
