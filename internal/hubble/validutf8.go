package hubble

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// validUTF8 replaces every string in m, and in the messages it holds, that is not
// valid UTF-8 with its valid form (each bad run of bytes becomes U+FFFD). Proto3
// strings must be UTF-8: one that is not fails the marshal of the whole response,
// and that ends the client's stream, so one bad flow would hide every flow after it
// and, through the relay, the node. Flows carry text from outside the agent (DNS
// names a pod chose, names and labels from the API server); ParseDNS escapes the
// names already, and this guards every field, including ones added later.
// Hubble's flow messages hold no map fields, so maps are not walked.
func validUTF8(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					if s := l.Get(i).String(); !utf8.ValidString(s) {
						l.Set(i, protoreflect.ValueOfString(strings.ToValidUTF8(s, "\uFFFD")))
					}
				} else if fd.Message() != nil {
					validUTF8(l.Get(i).Message())
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); !utf8.ValidString(s) {
				m.Set(fd, protoreflect.ValueOfString(strings.ToValidUTF8(s, "\uFFFD")))
			}
		case fd.Message() != nil:
			validUTF8(v.Message())
		}
		return true
	})
}
