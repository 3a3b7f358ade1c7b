package wire

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds JSON nesting. Real request bodies nest a handful of levels; the limit only
// exists so hostile input is rejected instead of being walked forever. encoding/json uses the same.
const maxDepth = 10000

// syntaxError describes why a byte slice is not JSON; off is the byte offset at fault.
type syntaxError struct {
	msg string
	off int
}

func (e *syntaxError) Error() string {
	return e.msg + " at offset " + strconv.Itoa(e.off)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func unexpected(b []byte, i int) *syntaxError {
	if i >= len(b) {
		return &syntaxError{msg: "unexpected end of JSON input", off: i}
	}
	return &syntaxError{msg: "invalid character " + strconv.QuoteRune(rune(b[i])), off: i}
}

// skipString returns the index just past the JSON string starting at b[i] == '"'. It validates
// escapes and rejects raw control characters; like encoding/json it accepts invalid UTF-8.
// escaped reports whether the string holds any backslash escape.
func skipString(b []byte, i int) (end int, escaped bool, err *syntaxError) {
	i++ // opening quote
	for i < len(b) {
		// Eight bytes at a time while none is a quote, a backslash or a control character.
		for i+8 <= len(b) && !specialIn(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, unexpected(b, i+1)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, unexpected(b, len(b))
				}
				for k := i + 2; k < i+6; k++ {
					if !isHex(b[k]) {
						return 0, false, &syntaxError{msg: "invalid \\u escape", off: k}
					}
				}
				i += 6
			default:
				return 0, false, &syntaxError{msg: "invalid escape", off: i + 1}
			}
		case c < 0x20:
			return 0, false, &syntaxError{msg: "control character in string", off: i}
		default:
			i++
		}
	}
	return 0, false, unexpected(b, i)
}

// specialIn reports whether any byte of the little-endian word x is '"', '\\' or below 0x20
// (SWAR: a byte b is flagged when b-k borrows, i.e. b < k, or b^q is zero).
func specialIn(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	lt := (x - ones*0x20) &^ x
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return ((q-ones)&^q|(bs-ones)&^bs|lt)&highs != 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// skipNumber returns the index just past the JSON number starting at b[i].
func skipNumber(b []byte, i int) (int, *syntaxError) {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) || !isDigit(b[i]) {
		return 0, unexpected(b, i)
	}
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, unexpected(b, i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, unexpected(b, i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

func skipLiteral(b []byte, i int, lit string) (int, *syntaxError) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		for k := 0; k < len(lit); k++ {
			if i+k >= len(b) || b[i+k] != lit[k] {
				return 0, unexpected(b, i+k)
			}
		}
	}
	return i + len(lit), nil
}

// skipValue validates the JSON value starting at b[i] (no leading space) and returns the index
// just past it. It is iterative, so nesting depth costs no stack; depth is capped at maxDepth.
func skipValue(b []byte, i int) (int, *syntaxError) {
	var small [64]byte
	stack := small[:0] // '{' or '[' per open container
	var err *syntaxError
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return 0, unexpected(b, i)
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return 0, &syntaxError{msg: "nesting deeper than " + strconv.Itoa(maxDepth), off: i}
			}
			close := byte('}')
			if c == '[' {
				close = ']'
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == close {
				i++
				goto after
			}
			stack = append(stack, c)
			if c == '{' {
				if i, err = skipKey(b, i); err != nil {
					return 0, err
				}
			}
			continue
		case c == '"':
			if i, _, err = skipString(b, i); err != nil {
				return 0, err
			}
		case c == '-' || isDigit(c):
			if i, err = skipNumber(b, i); err != nil {
				return 0, err
			}
		case c == 't':
			if i, err = skipLiteral(b, i, "true"); err != nil {
				return 0, err
			}
		case c == 'f':
			if i, err = skipLiteral(b, i, "false"); err != nil {
				return 0, err
			}
		case c == 'n':
			if i, err = skipLiteral(b, i, "null"); err != nil {
				return 0, err
			}
		default:
			return 0, unexpected(b, i)
		}
	after:
		for {
			if len(stack) == 0 {
				return i, nil
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, unexpected(b, i)
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i = skipSpace(b, i+1)
				if top == '{' {
					if i, err = skipKey(b, i); err != nil {
						return 0, err
					}
				}
				break
			}
			if top == '{' && b[i] == '}' || top == '[' && b[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return 0, unexpected(b, i)
		}
	}
}

// skipKey consumes `"key" :` plus the space after the colon, returning the value's index.
func skipKey(b []byte, i int) (int, *syntaxError) {
	if i >= len(b) || b[i] != '"' {
		return 0, unexpected(b, i)
	}
	i, _, err := skipString(b, i)
	if err != nil {
		return 0, err
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, unexpected(b, i)
	}
	return skipSpace(b, i+1), nil
}

// validJSON reports whether b is exactly one JSON value surrounded by optional space.
func validJSON(b []byte) bool {
	i := skipSpace(b, 0)
	end, err := skipValue(b, i)
	return err == nil && skipSpace(b, end) == len(b)
}

// The helpers below walk JSON that is already known to be valid (they skip values with
// skipValid). On invalid input they stop early or return garbage rather than panic, so a
// mistake costs correctness of the view, never the process.

// skipValid returns the index just past the value starting at b[i], for JSON already known to
// be valid: it only finds string ends (with a SIMD byte search) and matching brackets. On
// invalid input it returns some index ≤ len(b), never panics.
func skipValid(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipValidString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipValidString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) { // number or literal
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipValidString returns the index just past the string starting at b[i] == '"'.
func skipValidString(b []byte, i int) int {
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		j := i + q
		n := 0 // backslashes right before the quote: an odd count escapes it
		for k := j - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
}

// eachElem calls fn with the raw bytes of every element of the JSON array v, in order, until fn
// returns false. v must start with '['.
func eachElem(v []byte, fn func(elem []byte) bool) {
	if len(v) == 0 || v[0] != '[' {
		return
	}
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return
	}
	for i < len(v) {
		end := skipValid(v, i)
		if !fn(v[i:end]) {
			return
		}
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ',' {
			return
		}
		i = skipSpace(v, i+1)
	}
}

// eachMember calls fn with the raw key (quotes included) and raw value of every member of the
// JSON object v, in order, until fn returns false.
func eachMember(v []byte, fn func(key, val []byte) bool) {
	eachMemberAt(v, func(k0, k1, v0, v1 int) bool { return fn(v[k0:k1], v[v0:v1]) })
}

// eachMemberAt is eachMember with offsets into v: the key is v[k0:k1], the value v[v0:v1].
func eachMemberAt(v []byte, fn func(k0, k1, v0, v1 int) bool) {
	if len(v) == 0 || v[0] != '{' {
		return
	}
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == '}' {
		return
	}
	for i < len(v) && v[i] == '"' {
		kEnd := skipValidString(v, i)
		j := skipSpace(v, kEnd)
		if j >= len(v) || v[j] != ':' {
			return
		}
		j = skipSpace(v, j+1)
		end := skipValid(v, j)
		if !fn(i, kEnd, j, end) {
			return
		}
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ',' {
			return
		}
		i = skipSpace(v, i+1)
	}
}

// lookupAt returns the offsets in v of the value of the last member named name.
func lookupAt(v []byte, name string) (v0, v1 int, ok bool) {
	eachMemberAt(v, func(k0, k1, a, b int) bool {
		if keyIs(v[k0:k1], name) {
			v0, v1, ok = a, b, true
		}
		return true
	})
	return v0, v1, ok
}

// keyIs reports whether the raw JSON string key (quotes included) decodes to name.
func keyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
		return true
	}
	// Escaped spellings ("\u0072id") are legal JSON; compare decoded.
	for _, c := range key {
		if c == '\\' {
			var buf [64]byte
			return string(appendUnquote(buf[:0], key)) == name
		}
	}
	return false
}

// lookup returns the raw value of the last member named name in the JSON object v (the last
// duplicate wins, as in Python's json and encoding/json).
func lookup(v []byte, name string) (val []byte, ok bool) {
	eachMember(v, func(k, x []byte) bool {
		if keyIs(k, name) {
			val, ok = x, true
		}
		return true
	})
	return val, ok
}

// appendUnquote appends the decoded contents of the raw JSON string s (quotes included) to dst.
// Invalid surrogates and invalid UTF-8 become U+FFFD, as encoding/json does.
func appendUnquote(dst, s []byte) []byte {
	if len(s) < 2 {
		return dst
	}
	return appendUnquoted(dst, s[1:len(s)-1])
}

// appendUnquoted is appendUnquote of a JSON string's content (without its quotes).
func appendUnquoted(dst, s []byte) []byte {
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(s, i+2)
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2 = hex4(s, i+2)
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						i += 6
						r = d
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, s[i+1])
			}
			i += 2
			continue
		}
		if c != '\\' { // copy the run up to the next escape in one go when it is valid UTF-8
			j := bytes.IndexByte(s[i:], '\\')
			if j < 0 {
				j = len(s) - i
			}
			if run := s[i : i+j]; utf8.Valid(run) {
				dst = append(dst, run...)
				i += j
				continue
			}
		}
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

func hex4(s []byte, i int) rune {
	if i+4 > len(s) {
		return utf8.RuneError
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return utf8.RuneError
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendQuote appends s as a JSON string (see AppendJSONString).
func appendQuote(dst []byte, s string) []byte { return AppendJSONString(dst, s) }

// AppendJSONString appends s as a quoted JSON string. It escapes what JSON requires plus
// U+2028/U+2029 (so the output is also safe JavaScript) and replaces invalid UTF-8 with
// U+FFFD, as encoding/json does. HTML characters are left alone: these bodies never reach a
// browser as HTML. It is the one JSON string encoder of the repository's hand-built bodies.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendJSONStringBody(dst, s)
	return append(dst, '"')
}

// AppendJSONStringBody appends s escaped for the inside of a JSON string (no quotes), so
// callers can build a string from pieces.
func AppendJSONStringBody(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// kind classifies a raw JSON value by its first byte.
type kind byte

const (
	kindInvalid kind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func kindOf(v []byte) kind {
	if len(v) == 0 {
		return kindInvalid
	}
	switch c := v[0]; {
	case c == 'n':
		return kindNull
	case c == 't' || c == 'f':
		return kindBool
	case c == '"':
		return kindString
	case c == '[':
		return kindArray
	case c == '{':
		return kindObject
	case c == '-' || isDigit(c):
		return kindNumber
	}
	return kindInvalid
}

func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	case kindObject:
		return "an object"
	}
	return "invalid"
}
