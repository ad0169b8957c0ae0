package api_test

// Runnable examples of the generated client, against a real server (one
// SQLite instance for the whole file, started by TestMain). Each example
// makes what it needs under its own names, and prints only what does not
// change from run to run. Written by hand; nothing else in this directory is.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oapi-codegen/nullable"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

var server *testenv.Instance

func TestMain(m *testing.M) {
	var err error
	if server, err = testenv.Launch(); err != nil {
		fmt.Fprintln(os.Stderr, "start a server:", err)
		os.Exit(1)
	}
	code := m.Run()
	if found := server.Close(); len(found) > 0 {
		fmt.Fprintln(os.Stderr, strings.Join(found, "\n"))
		code = 1
	}
	os.Exit(code)
}

// client is a client of the example server that sends token.
func client(token string) *api.ClientWithResponses {
	c, err := api.NewClientWithResponses(server.URL+"/api", api.WithRequestEditorFn(
		func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		panic(err)
	}
	return c
}

// A client with a bearer token; every answer is typed by the contract.
func Example() {
	c := client(server.Owner)
	res, err := c.ListPermissionsWithResponse(context.Background())
	if err != nil {
		panic(err)
	}
	first := res.JSON200.Items[0]
	fmt.Println(res.StatusCode(), len(res.JSON200.Items), "permissions; the first is", first.Name, first.Scopes)
	// Output: 200 15 permissions; the first is ADMINISTRATOR [global]
}

// Creating a role: it lands at position 1, and the answer carries its ETag
// and Location.
func ExampleClientWithResponses_CreateRoleWithResponse() {
	c := client(server.Owner)
	res, err := c.CreateRoleWithResponse(context.Background(), "example-mods", &api.CreateRoleParams{},
		api.CreateRoleJSONRequestBody{Name: "Moderators", Permissions: &api.PermissionNames{api.MANAGEMESSAGES},
			Color: nullable.NewNullableWithValue("#3498db")})
	if err != nil {
		panic(err)
	}
	r := res.JSON201
	fmt.Println(res.StatusCode(), r.Id, r.Name, r.Position, r.Permissions)
	fmt.Println("ETag", res.HTTPResponse.Header.Get("ETag"), "Location", res.HTTPResponse.Header.Get("Location"))
	// Output:
	// 201 example-mods Moderators 1 [MANAGE_MESSAGES]
	// ETag "1" Location /api/roles/example-mods
}

// Writes take If-Match: a stale ETag is a typed 412 problem and changes
// nothing.
func ExampleClientWithResponses_RenameRoleWithResponse() {
	ctx := context.Background()
	c := client(server.Owner)
	if _, err := c.CreateRoleWithResponse(ctx, "example-editors", &api.CreateRoleParams{}, api.CreateRoleJSONRequestBody{Name: "Editors"}); err != nil {
		panic(err)
	}
	stale := `"1"`
	res, err := c.RenameRoleWithResponse(ctx, "example-editors", &api.RenameRoleParams{IfMatch: &stale}, api.RenameRoleJSONRequestBody{Name: "Writers"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode(), res.JSON200.Name, "ETag", res.HTTPResponse.Header.Get("ETag"))

	res, err = c.RenameRoleWithResponse(ctx, "example-editors", &api.RenameRoleParams{IfMatch: &stale}, api.RenameRoleJSONRequestBody{Name: "Authors"})
	if err != nil {
		panic(err)
	}
	p := res.ApplicationproblemJSON412
	fmt.Println(res.StatusCode(), p.Code, *p.Detail)
	// Output:
	// 200 Writers ETag "2"
	// 412 precondition_failed The resource has changed; its current ETag is "2". Read it again.
}

// A refusal says why: reason and the missing permissions.
func ExampleClientWithResponses_CreateChannelWithResponse() {
	ctx := context.Background()
	owner := client(server.Owner)
	u, err := owner.CreateUserWithResponse(ctx, &api.CreateUserParams{}, api.CreateUserJSONRequestBody{Username: "example-carol"})
	if err != nil {
		panic(err)
	}
	tok, err := owner.CreateTokenWithResponse(ctx, u.JSON201.Id, &api.CreateTokenParams{}, api.CreateTokenJSONRequestBody{Name: "laptop"})
	if err != nil {
		panic(err)
	}
	res, err := client(tok.JSON201.Token).CreateChannelWithResponse(ctx, "example-general", &api.CreateChannelParams{},
		api.CreateChannelJSONRequestBody{Name: "General"})
	if err != nil {
		panic(err)
	}
	p := res.ApplicationproblemJSON403
	fmt.Println(res.StatusCode(), p.Code, *p.Reason, *p.MissingPermissions)
	// Output: 403 forbidden missing_permissions [MANAGE_CHANNELS]
}

// Why does a user have (or lack) a permission in a channel? explain lists
// the rules that applied, in order.
func ExampleClientWithResponses_GetUserPermissionsWithResponse() {
	ctx := context.Background()
	c := client(server.Owner)
	u, err := c.CreateUserWithResponse(ctx, &api.CreateUserParams{}, api.CreateUserJSONRequestBody{Username: "example-dave"})
	if err != nil {
		panic(err)
	}
	if _, err := c.CreateChannelWithResponse(ctx, "example-ops", &api.CreateChannelParams{}, api.CreateChannelJSONRequestBody{Name: "Ops"}); err != nil {
		panic(err)
	}
	deny := api.PermissionNames{api.VIEWCHANNEL}
	if _, err := c.SetChannelOverwriteWithResponse(ctx, "example-ops", &api.SetChannelOverwriteParams{},
		api.SetChannelOverwriteJSONRequestBody{TargetType: api.OverwriteTargetTypeEveryone, Allow: api.PermissionNames{}, Deny: deny}); err != nil {
		panic(err)
	}
	channel, explain := api.ChannelID("example-ops"), true
	res, err := c.GetUserPermissionsWithResponse(ctx, u.JSON201.Id, &api.GetUserPermissionsParams{ChannelID: &channel, Explain: &explain})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode(), "permissions:", res.JSON200.Permissions)
	for _, x := range *res.JSON200.Explain {
		if x.Permission == api.VIEWCHANNEL {
			for _, s := range x.Steps {
				fmt.Println(x.Permission, s.Kind, s.Effect)
			}
		}
	}
	// Output:
	// 200 permissions: []
	// VIEW_CHANNEL global allow
	// VIEW_CHANNEL overwrite_everyone deny
}

// Attachments are raw bytes with their Content-Type; a download honours
// Range.
func ExampleClientWithResponses_GetAttachmentWithResponse() {
	ctx := context.Background()
	c := client(server.Owner)
	if _, err := c.CreateChannelWithResponse(ctx, "example-files", &api.CreateChannelParams{}, api.CreateChannelJSONRequestBody{Name: "Files"}); err != nil {
		panic(err)
	}
	put, err := c.PutAttachmentWithBodyWithResponse(ctx, "example-files", &api.PutAttachmentParams{AttachmentID: "notes.txt"},
		"text/plain", bytes.NewReader([]byte("hello, guildhall\n")))
	if err != nil {
		panic(err)
	}
	fmt.Println(put.StatusCode(), put.JSON201.Size, put.JSON201.ContentType)

	rng := "bytes=0-4"
	res, err := c.GetAttachmentWithResponse(ctx, "example-files", &api.GetAttachmentParams{AttachmentID: "notes.txt", Range: &rng})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d %q %s\n", res.StatusCode(), res.Body, res.HTTPResponse.Header.Get("Content-Range"))
	// Output:
	// 201 17 text/plain
	// 206 "hello" bytes 0-4/17
}

// Ending a timeout sends `null`, which the client keeps apart from an
// absent member because gen/api is generated with nullable-type: true.
func ExampleClientWithResponses_PatchUserWithApplicationMergePatchPlusJSONBodyWithResponse() {
	ctx := context.Background()
	owner := client(server.Owner)
	u, err := owner.CreateUserWithResponse(ctx, &api.CreateUserParams{}, api.CreateUserJSONRequestBody{Username: "example-erin"})
	if err != nil {
		panic(err)
	}
	id := u.JSON201.Id
	out, err := owner.PatchUserWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, id, &api.PatchUserParams{},
		api.UserPatch{TimeoutUntil: nullable.NewNullableWithValue(time.Now().Add(time.Hour))})
	if err != nil {
		panic(err)
	}
	back, err := owner.PatchUserWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, id, &api.PatchUserParams{},
		api.UserPatch{TimeoutUntil: nullable.NewNullNullable[time.Time]()})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.StatusCode(), out.JSON200.TimeoutUntil != nil, back.StatusCode(), back.JSON200.TimeoutUntil != nil)
	// Output: 200 true 200 false
}
