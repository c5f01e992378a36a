package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/bundle"
	"github.com/baton-dev/baton/internal/bundle/bundletest"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/store"
)

// pyBundle is a small Python bundle: main.py, and lib/helper.py beside it.
func pyBundle(t testing.TB) []byte {
	t.Helper()
	return bundletest.Zip(t, map[string]string{
		"main.py":       "import json, sys\nprint(json.dumps({'ok': True}))\n",
		"lib/helper.py": "def handler(event, context):\n    return {'n': 1}\n",
	}, bundle.Python, "main.py")
}

// uploadBundle uploads zip as tenant's and returns its id.
func (w *workerAPI) uploadBundle(tenant string, zip []byte) string {
	w.t.Helper()
	res := w.request("POST", w.public.URL+"/v1/udf/bundles", zip, "x-api-key", w.apiKey(tenant), "Content-Type", "application/zip")
	wantStatus(w.t, res, http.StatusCreated)
	return res.Body["bundle_id"].(string)
}

// udfPipeline is a pipeline whose one job runs bundle id, started at entrypoint ("": the
// bundle's own).
func udfPipeline(id, entrypoint string) string {
	udf := "{bundle_id: " + id + "}"
	if entrypoint != "" {
		udf = "{bundle_id: " + id + ", entrypoint: " + entrypoint + "}"
	}
	return `
name: userland
jobs:
  - name: evaluate
    activation: source
    runtime: ecs_udf
    operator: udf
    outputs: 0
    source: {kind: manual}
    udf: ` + udf + "\n"
}

func TestBundleUploadListGetDisable(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		zip := pyBundle(t)
		sum := sha256.Sum256(zip)
		res := w.request("POST", w.public.URL+"/v1/udf/bundles", zip, "x-api-key", key, "Content-Type", "application/zip")
		wantStatus(t, res, http.StatusCreated)
		id, _ := res.Body["bundle_id"].(string)
		if !strings.HasPrefix(id, "bndl_") || res.Body["sha256"] != hex.EncodeToString(sum[:]) || res.Body["size"] != float64(len(zip)) ||
			res.Body["language"] != "python" || res.Body["entrypoint"] != "main.py" || res.Body["state"] != "ready" || res.Body["created_at"] == nil {
			t.Fatalf("upload answered %s", res.Raw)
		}
		res = w.request("GET", w.public.URL+"/v1/udf/bundles/"+id, nil, "x-api-key", key)
		wantStatus(t, res, http.StatusOK)
		if m, _ := res.Body["manifest"].(map[string]any); m == nil || len(m["files"].([]any)) != 2 {
			t.Errorf("get answered %s, want the manifest with its two files", res.Raw)
		}
		res = w.request("GET", w.public.URL+"/v1/udf/bundles", nil, "x-api-key", key)
		if list, _ := res.Body["bundles"].([]any); len(list) != 1 {
			t.Errorf("list answered %s", res.Raw)
		}
		res = w.request("GET", w.public.URL+"/v1/udf/bundles", nil, "x-api-key", w.apiKey("other"))
		if list, _ := res.Body["bundles"].([]any); len(list) != 0 {
			t.Errorf("another tenant's list answered %s", res.Raw)
		}
		res = w.request("POST", w.public.URL+"/v1/udf/bundles/"+id+"/disable", nil, "x-api-key", key)
		wantStatus(t, res, http.StatusOK)
		if res.Body["state"] != "disabled" || res.Body["disabled_at"] == nil {
			t.Errorf("disable answered %s", res.Raw)
		}
	})
}

func TestBundleUploadRefusals(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		upload := func(body any, contentType string) response {
			return w.request("POST", w.public.URL+"/v1/udf/bundles", body, "x-api-key", key, "Content-Type", contentType)
		}
		res := upload("not a zip", "application/zip")
		wantStatus(t, res, http.StatusBadRequest)
		if !strings.Contains(res.Body["error"].(string), "not a zip") {
			t.Errorf("a body that is no zip: %s", res.Raw)
		}
		res = upload(pyBundle(t), "text/plain")
		wantStatus(t, res, http.StatusUnsupportedMediaType)
		res = upload(bytes.Repeat([]byte{'x'}, int(testBundleLimits.Archive)+10), "application/zip")
		wantStatus(t, res, http.StatusRequestEntityTooLarge)
		// The directory store signs no URLs: a two-step upload needs S3.
		res = upload(`{}`, "application/json")
		wantStatus(t, res, http.StatusNotImplemented)
		res = upload(`{"language": "python"}`, "application/json")
		wantStatus(t, res, http.StatusBadRequest)
		if list, _ := w.bundles.List(context.Background(), storeBundles("acme")); len(list) != 0 {
			t.Errorf("refused uploads stored %d bundles", len(list))
		}
		res = w.request("GET", w.public.URL+"/v1/udf/bundles/bndl_nope", nil, "x-api-key", key)
		wantStatus(t, res, http.StatusNotFound)
		res = w.request("GET", w.public.URL+"/v1/udf/bundles?cursor=!!", nil, "x-api-key", key)
		wantStatus(t, res, http.StatusBadRequest)
	})
}

// A deploy pins the bundle a job runs, and refuses one the tenant cannot run there, at the
// field's path.
func TestDeployPinsBundles(t *testing.T) {
	forEachWorkerDriver(t, func(t *testing.T, w *workerAPI) {
		key := w.apiKey("acme")
		id := w.uploadBundle("acme", pyBundle(t))
		foreign := w.uploadBundle("other", pyBundle(t))
		deploy := func(doc string) response {
			return w.request("POST", w.public.URL+"/pipelines", doc, "x-api-key", key, "Content-Type", "application/yaml")
		}
		for _, c := range []struct{ name, doc, want string }{
			{"an unknown bundle", udfPipeline("bndl_nope", ""), `jobs[0].udf.bundle_id: no bundle "bndl_nope"`},
			{"another tenant's bundle", udfPipeline(foreign, ""), `jobs[0].udf.bundle_id: no bundle "` + foreign + `"`},
			{"an entrypoint that is no file of it", udfPipeline(id, "nope.py"), `jobs[0].udf.entrypoint:`},
		} {
			res := deploy(c.doc)
			wantStatus(t, res, http.StatusBadRequest)
			if !strings.Contains(res.Body["error"].(string), c.want) {
				t.Errorf("%s: %s, want %q", c.name, res.Raw, c.want)
			}
		}
		res := deploy(udfPipeline(id, "lib.helper.handler"))
		wantStatus(t, res, http.StatusCreated)
		run, err := w.dp.RunSource(context.Background(), dataplane.RunSourceParams{Tenant: "acme", Pipeline: "userland", Job: "evaluate"})
		if err != nil {
			t.Fatal(err)
		}
		c, tok := w.claim(run.TaskID)
		u := c.Route.Job.UDF
		b, _ := w.bundles.Get(context.Background(), "acme", id)
		if u == nil || u.ID != id || u.SHA256 != b.SHA256 || u.Entrypoint != "lib.helper.handler" || u.Language != "python" || u.Download != "/v1/task/bundle" {
			t.Fatalf("the task's route pins %+v, want bundle %s at lib.helper.handler", u, id)
		}

		// The attempt downloads its bundle with its token; a current copy is not sent again.
		res = w.request("GET", w.public.URL+"/v1/task/bundle", nil, "X-Trace-Task-Capability", tok)
		wantStatus(t, res, http.StatusOK)
		if sum := sha256.Sum256(res.Raw); hex.EncodeToString(sum[:]) != b.SHA256 || res.Header.Get("ETag") != `"`+b.SHA256+`"` {
			t.Errorf("the download is not the bundle: %d bytes, ETag %q", len(res.Raw), res.Header.Get("ETag"))
		}
		res = w.request("GET", w.public.URL+"/v1/task/bundle", nil, "X-Trace-Task-Capability", tok, "If-None-Match", `"`+b.SHA256+`"`)
		wantStatus(t, res, http.StatusNotModified)

		// Disabled, it is neither downloaded nor deployed again.
		wantStatus(t, w.request("POST", w.public.URL+"/v1/udf/bundles/"+id+"/disable", nil, "x-api-key", key), http.StatusOK)
		res = w.request("GET", w.public.URL+"/v1/task/bundle", nil, "X-Trace-Task-Capability", tok, "If-None-Match", `"`+b.SHA256+`"`)
		wantStatus(t, res, http.StatusForbidden)
		if msg, _ := res.Body["message"].(string); !strings.Contains(msg, "was disabled") {
			t.Errorf("a disabled bundle's download: %s", res.Raw)
		}
		res = deploy(strings.ReplaceAll(udfPipeline(id, ""), "userland", "userland2"))
		wantStatus(t, res, http.StatusBadRequest)
		if !strings.Contains(res.Body["error"].(string), "jobs[0].udf.bundle_id: bundle "+id+" was disabled") {
			t.Errorf("deploying a disabled bundle: %s", res.Raw)
		}
	})
}

func storeBundles(tenant string) store.BundleListParams {
	return store.BundleListParams{Tenant: tenant, Limit: 100}
}
