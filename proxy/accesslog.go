package proxy

// The listener's wiring of its access log (internal/accesslog): what a
// line records of a request, and the safe reasons of its errors.

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/internal/accesslog"
	"registryd/maven"
)

// logAccess writes the access line of x: what the listener knows of every
// request, plus what resolution recorded (registry, caller, result,
// upstream). err is what route returned (nil for a success).
func (s *Server) logAccess(x *exchange, err error) {
	if s.alog == nil {
		return
	}
	ctx := x.ctx
	rec := accesslog.Record{
		Time:     x.start,
		Duration: time.Since(x.start),
		Client:   ctx.RemoteIP(),
		Method:   b2s(ctx.Method()),
		Path:     b2s(rawPath(ctx)),
		UA:       b2s(ctx.UserAgent()),
		Status:   ctx.Response.StatusCode(),
		Bytes:    responseBytes(ctx),
		Result:   x.res.String(),
		Upstream: x.up,
		Merge:    x.merge,
	}
	if x.reg != nil {
		rec.Registry = x.reg.id
	}
	setPrincipal(&rec, x.who)
	if err != nil {
		rec.Error = accessError(err)
		if toAPI(err) == nil {
			rec.RequestID = s.requestID(ctx)
		}
	} else if x.merge == mergePartial && x.miss != nil {
		rec.Error = x.miss.reasons(false)
	}
	s.alog.Write(&rec)
}

// responseBytes is the body the handler put in the answer: its length, or
// for a streamed body the length announced (0 when unknown, chunked).
func responseBytes(ctx *fasthttp.RequestCtx) int64 {
	if ctx.IsHead() {
		return 0
	}
	resp := &ctx.Response
	if resp.IsBodyStream() {
		return max(int64(resp.Header.ContentLength()), 0)
	}
	return int64(len(resp.Body()))
}

// accessError is a short reason for a failed request that is safe to log:
// the upstream reasons of a 502/504, the path parser's reason of a 400, the
// fixed message of any other answer, and "internal error" for a 500 (its
// text is in the error line with the same request id).
func accessError(err error) string {
	var miss *missError
	var fe *fillError
	var me *maven.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &miss):
		return miss.reasons(true)
	case errors.As(err, &fe):
		return failureReason(fe.err)
	case errors.As(err, &me):
		return me.Reason()
	}
	if ae := toAPI(err); ae != nil {
		return apiReason(ae)
	}
	return "internal error"
}

// apiReason is the first string value of an answer's JSON body (its
// "message" or "error"), else its status code.
func apiReason(ae *apiError) string {
	if i := strings.Index(ae.body, `":"`); i >= 0 {
		v := ae.body[i+3:]
		if j := strings.IndexByte(v, '"'); j >= 0 {
			return v[:j]
		}
	}
	return strconv.Itoa(ae.status)
}

// setPrincipal records who called, by ids only.
func setPrincipal(r *accesslog.Record, p auth.Principal) {
	switch p.Kind {
	case auth.PersonalToken:
		r.User, r.Token = p.User.ID, p.Token.ID
	case auth.DeployToken:
		r.DeployToken = p.Deploy.ID
	}
}
