package convert

import "bytes"

// splitYAML splits a multi-document YAML file.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
	return docs
}
