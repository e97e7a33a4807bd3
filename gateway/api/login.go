package api

import "time"

// Login is the answer of POST /v1/logins: a one-time code that GET
// /login?code=<code> exchanges for a dashboard session cookie carrying the
// minting token's name and scopes.
type Login struct {
	// Code is random, single use and valid until ExpiresAt.
	Code string `json:"code"`
	// Path is the login link relative to the gateway's base URL:
	// /login?code=<code>.
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Session is GET /v1/session: who the request runs as and how it
// authenticated.
type Session struct {
	Principal string  `json:"principal"`
	Scopes    []Scope `json:"scopes"`
	// Via is "token" (Authorization header), "session" (the dashboard's
	// cookie) or "anonymous".
	Via string `json:"via"`
	// ExpiresAt is when a cookie session ends; absent otherwise.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}
