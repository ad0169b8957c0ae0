package httpapi

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
)

// Request bodies the server does not read: JSON in another charset, and
// bodies with a content coding. Both are a 415.

// checkJSONCharset refuses a JSON media type whose charset parameter is not
// UTF-8 (RFC 8259 §8.1: JSON exchanged between systems is UTF-8; a body
// declared as Latin-1 would be misread).
func checkJSONCharset(mediaType, contentType string) error {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil // already refused by the media type check
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return apperr.UnsupportedMedia("A " + mediaType + " body is UTF-8: the charset parameter may only be utf-8, not " + strconv.Quote(cs) + ".")
	}
	return nil
}

// checkContentEncoding refuses a request body with a content coding (RFC
// 9110 §8.4.1: a server answers 415 to a coding it does not accept): bodies
// are read as sent, and a gzip body would be stored or parsed as it is.
func checkContentEncoding(op *operation, req *http.Request) error {
	if !op.jsonBody && !op.rawBody {
		return nil
	}
	for _, v := range req.Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return apperr.UnsupportedMedia("Content-Encoding " + strconv.Quote(c) + " is not accepted: send the body uncompressed.")
			}
		}
	}
	return nil
}
