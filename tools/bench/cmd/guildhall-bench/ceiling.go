package main

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/internal/permissions"
)

// The ceiling is a bare Echo v4 server with the scenarios' routes, answering
// from memory with bodies shaped like Guildhall's (the contract's User, the
// list envelope, the permissions object, Channel, Overwrite). What it costs
// per request is what the framework, encoding/json and net/http cost: the
// floor under any server built on them. It runs as its own process (the
// "ceiling" subcommand) so that its CPU is counted like the real servers'.

type cUser struct {
	CreatedAt   time.Time `json:"created_at"`
	DisplayName string    `json:"display_name"`
	Email       *string   `json:"email"`
	ID          string    `json:"id"`
	IsOwner     bool      `json:"is_owner"`
	Roles       []string  `json:"roles"`
	Status      string    `json:"status"`
	UpdatedAt   time.Time `json:"updated_at"`
	Username    string    `json:"username"`
}

type cList[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

type cStep struct {
	Detail string `json:"detail"`
	Effect string `json:"effect"`
	Kind   string `json:"kind"`
	RoleID string `json:"role_id,omitempty"`
}

type cExplanation struct {
	Granted    bool    `json:"granted"`
	Permission string  `json:"permission"`
	Steps      []cStep `json:"steps"`
}

type cPerms struct {
	ChannelID   *string        `json:"channel_id"`
	Explain     []cExplanation `json:"explain,omitempty"`
	Permissions []string       `json:"permissions"`
	UserID      string         `json:"user_id"`
}

type cChannel struct {
	CreatedAt time.Time `json:"created_at"`
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	ParentID  *string   `json:"parent_id"`
	Position  int       `json:"position"`
	Synced    bool      `json:"synced"`
	Topic     *string   `json:"topic"`
	UpdatedAt time.Time `json:"updated_at"`
}

type cOverwrite struct {
	Allow      []string `json:"allow"`
	Deny       []string `json:"deny"`
	TargetID   string   `json:"target_id,omitempty"`
	TargetType string   `json:"target_type"`
}

type cProblem struct {
	Code     string `json:"code"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
	Status   int    `json:"status"`
	Title    string `json:"title"`
	Type     string `json:"type"`
}

type cUserCreate struct {
	Username    string  `json:"username"`
	DisplayName *string `json:"display_name"`
	Email       *string `json:"email"`
}

// cChannelData is one channel the ceiling knows, with its answers prepared.
type cChannelData struct {
	channel    cChannel
	overwrites []cOverwrite
	perms      []string       // the permissions of the user asked about here
	explain    []cExplanation // and why
}

type ceiling struct {
	token    []byte
	users    map[string]*cUser
	order    []string // user IDs, sorted: the keyset of the list
	channels map[string]*cChannelData
	list     []cChannel     // every channel, in the service's tree order: by position
	global   []cExplanation // base permissions of a user without roles
	held     []string       // and their names
}

var usernameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{2,32}$`)

func ceilingMain(args []string) error {
	fs := flag.NewFlagSet("guildhall-bench ceiling", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback)")
	token := fs.String("token", "", "the bearer token every /api request must carry")
	idsFile := fs.String("ids", "", "user IDs, one a line: the first is the heavy user, the second the light one, then the seeded users")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *token == "" || *idsFile == "" {
		return errors.New("ceiling: -token and -ids are required")
	}
	ids, err := readLines(*idsFile)
	if err != nil {
		return err
	}
	if len(ids) < 3 {
		return errors.New("ceiling: -ids needs the heavy user, the light user and at least one more")
	}
	c := newCeiling(*token, ids[0], ids[1], ids[2:])
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: c.handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("ceiling listening on http://%s (%d users)\n", ln.Addr(), len(c.order))
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

func newCeiling(token, heavyUser, lightUser string, seeded []string) *ceiling {
	epoch := time.Date(2026, 11, 22, 8, 15, 30, 123456000, time.UTC)
	c := &ceiling{token: []byte(token), users: map[string]*cUser{}, channels: map[string]*cChannelData{}}
	add := func(id, username, display string, roles []string) {
		c.users[id] = &cUser{CreatedAt: epoch, DisplayName: display, ID: id, Roles: roles,
			Status: "active", UpdatedAt: epoch, Username: username}
		c.order = append(c.order, id)
	}
	for i, id := range seeded {
		add(id, "seed_"+strconv.Itoa(i), "Seed user "+strconv.Itoa(i), []string{})
	}
	heavyRoleIDs := make([]string, heavyRoles)
	for i := range heavyRoleIDs {
		heavyRoleIDs[i] = heavyRoleID(i + 1)
	}
	add(heavyUser, "heavy", "Heavy", heavyRoleIDs)
	add(lightUser, "light", "Light", []string{})
	slices.Sort(c.order)

	c.global = explainFor(nil, nil, nil)
	c.held = heldOf(c.global)
	channel := func(id, name string, ows []overwriteSpec, roles []int, user string) {
		d := &cChannelData{channel: cChannel{CreatedAt: epoch, ID: id, Kind: "text", Name: name, Position: len(c.list), UpdatedAt: epoch}}
		for _, o := range ows {
			d.overwrites = append(d.overwrites, cOverwrite{Allow: o.allow, Deny: o.deny, TargetID: o.targetID, TargetType: o.targetType})
		}
		if d.overwrites == nil {
			d.overwrites = []cOverwrite{}
		}
		d.explain = explainFor(roles, ows, &user)
		d.perms = heldOf(d.explain)
		c.channels[id] = d
		c.list = append(c.list, d.channel)
	}
	overUsers := append([]string{heavyUser}, seeded[:min(len(seeded), heavyUserOvers-1)]...)
	allRoles := make([]int, heavyRoles)
	for i := range allRoles {
		allRoles[i] = i + 1
	}
	channel(benchChannel, "Bench", benchOverwrites(), nil, "")
	for _, id := range listChannels() {
		channel(id, id, nil, nil, "")
	}
	channel(heavyChannel, "Heavy", heavyOverwrites(overUsers), allRoles, heavyUser)
	channel(lightChannel, "Light", nil, nil, lightUser)
	return c
}

func heldOf(ex []cExplanation) []string {
	held := []string{}
	for _, e := range ex {
		if e.Granted {
			held = append(held, e.Permission)
		}
	}
	return held
}

// explainFor explains the permissions of a user holding the heavy roles
// roles (1-based) in a channel with the overwrites ows (user: the user's
// ID, for their own overwrite), or, when user is nil, their base
// permissions outside any channel. The product's own engine
// (internal/permissions) decides, so the ceiling's bodies say what
// Guildhall's say; only their encoding is the ceiling's. It runs once, at
// start.
func explainFor(roles []int, ows []overwriteSpec, user *string) []cExplanation {
	subject := permissions.Subject{Global: permissions.DefaultGlobal}
	for _, r := range roles {
		subject.Roles = append(subject.Roles, permissions.Role{ID: heavyRoleID(r), Permissions: permSet(heavyRolePerms(r))})
	}
	var channel *permissions.Channel
	if user != nil {
		channel = &permissions.Channel{}
		for _, o := range ows {
			ow := permissions.Overwrite{Allow: permSet(o.allow), Deny: permSet(o.deny)}
			switch {
			case o.targetType == "everyone":
				channel.Everyone = ow
			case o.targetType == "role":
				channel.Roles = append(channel.Roles, permissions.RoleOverwrite{RoleID: o.targetID, Overwrite: ow})
			case o.targetType == "user" && o.targetID == *user:
				channel.User = ow
			}
		}
	}
	list := permissions.Explain(subject, channel)
	out := make([]cExplanation, len(list))
	for i, e := range list {
		steps := make([]cStep, len(e.Steps))
		for j, st := range e.Steps {
			steps[j] = cStep{Kind: string(st.Kind), Effect: string(st.Effect), RoleID: st.RoleID, Detail: st.Detail}
		}
		out[i] = cExplanation{Permission: e.Permission.String(), Granted: e.Granted, Steps: steps}
	}
	return out
}

// permSet is the set of the fixtures' names, which are the catalog's.
func permSet(names []string) permissions.Set {
	s, err := permissions.Parse(names)
	if err != nil {
		panic(fmt.Sprintf("bench fixtures: %v", err))
	}
	return s
}

func (c *ceiling) handler() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(ec echo.Context) error { return ec.String(http.StatusOK, "ok") })
	e.GET("/readyz", func(ec echo.Context) error { return ec.String(http.StatusOK, "ready") })
	api := e.Group("/api", c.auth)
	api.GET("/users/:userID", c.getUser)
	api.GET("/users", c.listUsers)
	api.POST("/users", c.createUser)
	api.GET("/users/:userID/permissions", c.getPermissions)
	api.GET("/channels", c.listChannels)
	api.GET("/channels/:channelID", c.getChannel)
	api.GET("/channels/:channelID/permissions", c.listOverwrites)
	// Who has access: a page of users, as the list of users answers it.
	api.GET("/channels/:channelID/access", c.listUsers)
	return e
}

func problem(ec echo.Context, status int, code, title, detail string) error {
	ec.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	ec.Response().WriteHeader(status)
	return json.NewEncoder(ec.Response()).Encode(cProblem{Code: code, Detail: detail,
		Instance: ec.Request().URL.Path, Status: status, Title: title, Type: "/problems/" + code})
}

func (c *ceiling) auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		got, ok := strings.CutPrefix(ec.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), c.token) != 1 {
			return problem(ec, http.StatusUnauthorized, "unauthenticated", "Authentication required", "A valid bearer token is required.")
		}
		return next(ec)
	}
}

func (c *ceiling) getUser(ec echo.Context) error {
	u, ok := c.users[ec.Param("userID")]
	if !ok {
		return problem(ec, http.StatusNotFound, "not_found", "Not found", "No such user.")
	}
	ec.Response().Header().Set("ETag", `"1"`)
	return ec.JSON(http.StatusOK, u)
}

type cCursor struct {
	K string `json:"k"`
}

func (c *ceiling) listUsers(ec echo.Context) error {
	limit := 50
	if s := ec.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 200 {
			return problem(ec, http.StatusBadRequest, "validation", "Request is invalid", "limit must be 1-200")
		}
		limit = n
	}
	from := 0
	if s := ec.QueryParam("cursor"); s != "" {
		raw, err := base64.RawURLEncoding.DecodeString(s)
		var cur cCursor
		if err == nil {
			err = json.Unmarshal(raw, &cur)
		}
		if err != nil {
			return problem(ec, http.StatusBadRequest, "validation", "Request is invalid", "bad cursor")
		}
		from, _ = slices.BinarySearch(c.order, cur.K)
		if from < len(c.order) && c.order[from] == cur.K {
			from++
		}
	}
	to := min(from+limit, len(c.order))
	out := cList[*cUser]{Items: make([]*cUser, 0, to-from)}
	for _, id := range c.order[from:to] {
		out.Items = append(out.Items, c.users[id])
	}
	if to < len(c.order) {
		b, _ := json.Marshal(cCursor{K: c.order[to-1]})
		s := base64.RawURLEncoding.EncodeToString(b)
		out.NextCursor = &s
	}
	return ec.JSON(http.StatusOK, out)
}

func (c *ceiling) createUser(ec echo.Context) error {
	dec := json.NewDecoder(http.MaxBytesReader(ec.Response(), ec.Request().Body, 1<<20))
	dec.DisallowUnknownFields()
	var in cUserCreate
	if err := dec.Decode(&in); err != nil {
		return problem(ec, http.StatusBadRequest, "validation", "Request is invalid", err.Error())
	}
	if !usernameRE.MatchString(in.Username) {
		return problem(ec, http.StatusBadRequest, "validation", "Request is invalid", "bad username")
	}
	display := in.Username
	if in.DisplayName != nil {
		if utf8.RuneCountInString(*in.DisplayName) > 100 {
			return problem(ec, http.StatusBadRequest, "validation", "Request is invalid", "display_name too long")
		}
		display = *in.DisplayName
	}
	if in.Email != nil && !strings.Contains(*in.Email, "@") {
		return problem(ec, http.StatusBadRequest, "validation", "Request is invalid", "bad email")
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	u := cUser{CreatedAt: now, DisplayName: display, Email: in.Email, ID: id.String(), Roles: []string{},
		Status: "active", UpdatedAt: now, Username: in.Username}
	h := ec.Response().Header()
	h.Set("Location", "/api/users/"+u.ID)
	h.Set("ETag", `"1"`)
	return ec.JSON(http.StatusCreated, u)
}

func (c *ceiling) getPermissions(ec echo.Context) error {
	id := ec.Param("userID")
	if _, ok := c.users[id]; !ok {
		return problem(ec, http.StatusNotFound, "not_found", "Not found", "No such user.")
	}
	out := cPerms{UserID: id}
	explain := c.global
	if ch := ec.QueryParam("channelID"); ch != "" {
		d, ok := c.channels[ch]
		if !ok {
			return problem(ec, http.StatusNotFound, "not_found", "Not found", "No such channel.")
		}
		out.ChannelID, out.Permissions, explain = &d.channel.ID, d.perms, d.explain
	} else {
		out.Permissions = c.held
	}
	if ec.QueryParam("explain") == "true" {
		out.Explain = explain
	}
	return ec.JSON(http.StatusOK, out)
}

func (c *ceiling) getChannel(ec echo.Context) error {
	d, ok := c.channels[ec.Param("channelID")]
	if !ok {
		return problem(ec, http.StatusNotFound, "not_found", "Not found", "No such channel.")
	}
	ec.Response().Header().Set("ETag", `"1"`)
	return ec.JSON(http.StatusOK, d.channel)
}

func (c *ceiling) listChannels(ec echo.Context) error {
	return ec.JSON(http.StatusOK, cList[cChannel]{Items: c.list})
}

func (c *ceiling) listOverwrites(ec echo.Context) error {
	d, ok := c.channels[ec.Param("channelID")]
	if !ok {
		return problem(ec, http.StatusNotFound, "not_found", "Not found", "No such channel.")
	}
	return ec.JSON(http.StatusOK, cList[cOverwrite]{Items: d.overwrites})
}
