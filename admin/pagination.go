package admin

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Offset pagination as GitLab does it: page (default 1), per_page (default 20,
// clamped to 100), and every header on every page.
const (
	defaultPerPage = 20
	maxPerPage     = 100
)

type page struct {
	Page, PerPage int
}

func (p page) Offset() int { return (p.Page - 1) * p.PerPage }

func (p *params) page() page {
	pg := page{Page: 1, PerPage: defaultPerPage}
	if v := p.integer("page"); v != nil {
		if *v < 1 {
			p.fail("page does not have a valid value")
		} else {
			pg.Page = *v
		}
	}
	if v := p.integer("per_page"); v != nil {
		if *v < 1 {
			p.fail("per_page does not have a valid value")
		} else {
			pg.PerPage = min(*v, maxPerPage)
		}
	}
	// Keep offsets far from overflow whatever a client asks for.
	pg.Page = min(pg.Page, 1<<24)
	return pg
}

// readListParams reads the parameters of a paged list: the page and an
// optional filter (nil when absent).
func readListParams(r *http.Request, filter string) (page, *string, error) {
	in, err := readParams(r)
	if err != nil {
		return page{}, nil, err
	}
	pg := in.page()
	f := in.str(filter)
	if err := in.err(); err != nil {
		return page{}, nil, err
	}
	return pg, f, nil
}

// writePage answers one page of a list: the rendered items and the
// pagination headers.
func (s *Server) writePage(w http.ResponseWriter, r *http.Request, pg page, total int, items any) {
	s.setPageHeaders(w, r, pg, total)
	writeJSON(w, http.StatusOK, items)
}

// setPageHeaders writes X-Page, X-Per-Page, X-Total, X-Total-Pages,
// X-Next-Page, X-Prev-Page and Link.
func (s *Server) setPageHeaders(w http.ResponseWriter, r *http.Request, pg page, total int) {
	pages := max(1, (total+pg.PerPage-1)/pg.PerPage)
	h := w.Header()
	h.Set("X-Page", strconv.Itoa(pg.Page))
	h.Set("X-Per-Page", strconv.Itoa(pg.PerPage))
	h.Set("X-Total", strconv.Itoa(total))
	h.Set("X-Total-Pages", strconv.Itoa(pages))
	// Past the end, the previous page is the last one: X-Prev-Page and the
	// prev link must name the same page.
	nextN, prevN := 0, 0
	if pg.Page < pages {
		nextN = pg.Page + 1
	}
	if pg.Page > 1 {
		prevN = min(pg.Page-1, pages)
	}
	h.Set("X-Next-Page", pageNumber(nextN))
	h.Set("X-Prev-Page", pageNumber(prevN))

	var links []string
	link := func(n int, rel string) {
		links = append(links, "<"+s.pageURL(r, n, pg.PerPage)+`>; rel="`+rel+`"`)
	}
	if prevN != 0 {
		link(prevN, "prev")
	}
	if nextN != 0 {
		link(nextN, "next")
	}
	link(1, "first")
	link(pages, "last")
	h.Set("Link", strings.Join(links, ", "))
}

// pageNumber is a page header value: empty for no page.
func pageNumber(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// pageURL is the request URL on the external host with page and per_page
// replaced and the query keys sorted.
func (s *Server) pageURL(r *http.Request, n, perPage int) string {
	q := r.URL.Query()
	q.Set("page", strconv.Itoa(n))
	q.Set("per_page", strconv.Itoa(perPage))
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, v := range q[k] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(k) + "=" + url.QueryEscape(v))
		}
	}
	return strings.TrimSuffix(s.opts.ExternalURL, "/") + r.URL.EscapedPath() + "?" + b.String()
}
