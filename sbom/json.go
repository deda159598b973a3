package sbom

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"registryd/store"
)

func (sr *sbomReader) decodeString(dst *string, at string) error {
	if err := sr.dec.Decode(dst); err != nil {
		return sr.decodeError(err, at)
	}
	return nil
}

// decodeAt decodes the next value into dst; a problem names at()+key.
func (sr *sbomReader) decodeAt(dst any, at func() string, key string) error {
	if err := sr.dec.Decode(dst); err != nil {
		return sr.decodeError(err, at()+key)
	}
	return nil
}

// array calls each for every element of the top-level array that comes
// next; anything but an array (or null) is a 400.
func (sr *sbomReader) array(key string, each func(i int) error) error {
	tok, err := sr.dec.Token()
	if err != nil {
		return sr.jsonError(err)
	}
	if tok == nil { // null: no entries
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return formatError(key + " must be an array")
	}
	return sr.elements(each)
}

// elements calls each for every element of the array whose '[' was read,
// and reads its ']'.
func (sr *sbomReader) elements(each func(i int) error) error {
	for i := 0; sr.dec.More(); i++ {
		if err := each(i); err != nil {
			return err
		}
		if len(sr.problems.Fields) >= store.MaxImportProblems {
			return sr.problems
		}
	}
	if _, err := sr.dec.Token(); err != nil {
		return sr.jsonError(err)
	}
	return nil
}

// openAt reads the start of the value at at()+key, which must be a want
// ('{' or '['). null is ok == false with no error; another kind of value is
// a validation error naming it.
func (sr *sbomReader) openAt(at func() string, key string, want json.Delim) (ok bool, err error) {
	tok, err := sr.dec.Token()
	if err != nil {
		return false, sr.jsonError(err)
	}
	if tok == nil {
		return false, nil
	}
	if d, isDelim := tok.(json.Delim); isDelim && d == want {
		return true, nil
	}
	kind := "object"
	if want == '[' {
		kind = "array"
	}
	sr.problems.Add(at()+key, "must be a JSON "+kind+", not "+tokenKind(tok))
	return false, sr.problems
}

// tokenKind names the kind of JSON value a token starts, as
// json.UnmarshalTypeError does.
func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number"
}

// jsonError turns a failure of the JSON reader into an *Error; a failure
// of the body's reader stays reachable through it (a body over the
// listener's limit is a 413, not a bad SBOM).
func (sr *sbomReader) jsonError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return formatError(fmt.Sprintf("the body is not valid JSON (at byte %d: %s)", se.Offset, se.Error()))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return formatError("the body ends before the SBOM does")
	}
	return &Error{Reason: "the body could not be read", Err: err}
}

// decodeError names where a value has the wrong JSON type.
func (sr *sbomReader) decodeError(err error, at string) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := at
		if te.Field != "" {
			field += "." + te.Field
		}
		sr.problems.Add(field, "must be a JSON "+jsonKind(te.Type.Kind().String())+", not "+te.Value)
		return sr.problems
	}
	return sr.jsonError(err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// skipValue reads past the next JSON value without keeping it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}
