// Encodes each element of the JSON array on stdin as kube-apiserver encodes an object for a
// webhook: numbers read as apimachinery's unstructured decoder reads them (int64 when they parse
// as one, else float64), then json.NewEncoder(os.Stdout).Encode (HTML escaping on, one document
// per line). Regenerate: go run encode.go < values.json > go1.19.jsonl
package main

import (
	"encoding/json"
	"os"
	"strconv"
)

func numbers(v interface{}) interface{} {
	switch t := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			panic(err)
		}
		return f
	case map[string]interface{}:
		for k, e := range t {
			t[k] = numbers(e)
		}
	case []interface{}:
		for i, e := range t {
			t[i] = numbers(e)
		}
	}
	return v
}

func main() {
	decoder := json.NewDecoder(os.Stdin)
	decoder.UseNumber()
	var values []interface{}
	if err := decoder.Decode(&values); err != nil {
		panic(err)
	}
	encoder := json.NewEncoder(os.Stdout)
	for _, v := range values {
		if err := encoder.Encode(numbers(v)); err != nil {
			panic(err)
		}
	}
}
