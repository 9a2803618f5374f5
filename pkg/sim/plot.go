package sim

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// PlotLine is one line of the plot: y by integer x, NaN where unknown.
type PlotLine struct {
	Label string
	Y     []float64
	// Points, when set, draws only these x, as markers: a published reference
	// rather than a measured curve, so nothing is drawn between its points.
	Points map[int]float64
}

var plotColors = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255},
	{255, 127, 14, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {23, 190, 207, 255},
}

var (
	plotInk  = color.RGBA{30, 30, 30, 255}
	plotGrid = color.RGBA{225, 225, 225, 255}
	plotRef  = color.RGBA{90, 90, 90, 255}
)

const (
	plotWidth, plotHeight = 1200, 800
	textScale             = 2
)

// WritePlot draws unallocated GPU % against arrived % for x from xMin to the end of
// the lines, one line per policy and markers per published reference, with
// axis labels and a legend, as a PNG.
func WritePlot(path, title string, xMin int, lines []PlotLine) error {
	img := image.NewRGBA(image.Rect(0, 0, plotWidth, plotHeight))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	left, right, top, bottom := 120, plotWidth-40, 80, plotHeight-110

	xMax, yMax := xMin+1, 1.0
	for _, l := range lines {
		for x, y := range l.Y {
			if x >= xMin && !math.IsNaN(y) {
				xMax, yMax = max(xMax, x), max(yMax, y)
			}
		}
		for x, y := range l.Points {
			if x >= xMin {
				xMax, yMax = max(xMax, x), max(yMax, y)
			}
		}
	}
	yStep := niceStep(yMax / 8)
	yTop := math.Ceil(yMax/yStep) * yStep
	px := func(x float64) int {
		return left + int(math.Round((x-float64(xMin))/float64(xMax-xMin)*float64(right-left)))
	}
	py := func(y float64) int { return bottom - int(math.Round(y/yTop*float64(bottom-top))) }

	// Grid, ticks and tick labels.
	xStep := 10
	if xMax-xMin <= 30 {
		xStep = 5
	}
	for x := (xMin + xStep - 1) / xStep * xStep; x <= xMax; x += xStep {
		line(img, px(float64(x)), top, px(float64(x)), bottom, 1, plotGrid)
		drawText(img, strconv.Itoa(x), px(float64(x)), bottom+12, plotInk, alignCenter, false)
	}
	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		line(img, left, py(y), right, py(y), 1, plotGrid)
		drawText(img, strconv.FormatFloat(y, 'f', -1, 64), left-12, py(y)-13, plotInk, alignRight, false)
	}
	line(img, left, bottom, right, bottom, 2, plotInk)
	line(img, left, top, left, bottom, 2, plotInk)

	drawText(img, title, (left+right)/2, 20, plotInk, alignCenter, false)
	drawText(img, "arrived workload (% of cluster GPU capacity)", (left+right)/2, bottom+55, plotInk, alignCenter, false)
	drawText(img, "unallocated GPU (%)", 20, (top+bottom)/2, plotInk, alignCenter, true)

	// Lines.
	for i, l := range lines {
		c := plotColors[i%len(plotColors)]
		if l.Points != nil {
			c = plotRef
		}
		prevX, prevY, have := 0, 0, false
		for x := xMin; x <= xMax; x++ {
			var y float64
			var ok bool
			if l.Points != nil {
				y, ok = l.Points[x]
			} else if x < len(l.Y) && !math.IsNaN(l.Y[x]) {
				y, ok = l.Y[x], true
			}
			if !ok {
				continue
			}
			cx, cy := px(float64(x)), py(y)
			if l.Points != nil {
				fillRect(img, cx-6, cy-6, cx+6, cy+6, c)
				continue
			}
			if have {
				line(img, prevX, prevY, cx, cy, 3, c)
			}
			prevX, prevY, have = cx, cy, true
		}
	}

	// Legend, top right, where the curves have come down.
	const rowHeight = 34
	legendWidth := 0
	for _, l := range lines {
		legendWidth = max(legendWidth, textWidth(l.Label))
	}
	lx, ly := right-legendWidth-90, top+12
	fillRect(img, lx-12, ly-8, right-8, ly+len(lines)*rowHeight, color.RGBA{255, 255, 255, 255})
	strokeRect(img, lx-12, ly-8, right-8, ly+len(lines)*rowHeight, plotInk)
	for i, l := range lines {
		y := ly + i*rowHeight + rowHeight/2
		if l.Points != nil {
			fillRect(img, lx+19, y-6, lx+31, y+6, plotRef)
		} else {
			line(img, lx, y, lx+50, y, 3, plotColors[i%len(plotColors)])
		}
		drawText(img, l.Label, lx+62, y-13, plotInk, alignLeft, false)
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return f.Close()
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*pow {
			return m * pow
		}
	}
	return 10 * pow
}

// line draws a line of the given width.
func line(img *image.RGBA, x0, y0, x1, y1, width int, c color.RGBA) {
	dx, dy := x1-x0, y1-y0
	steps := max(abs(dx), abs(dy))
	if steps == 0 {
		steps = 1
	}
	for s := 0; s <= steps; s++ {
		x := x0 + int(math.Round(float64(dx*s)/float64(steps)))
		y := y0 + int(math.Round(float64(dy*s)/float64(steps)))
		fillRect(img, x-width/2, y-width/2, x-width/2+width-1, y-width/2+width-1, c)
	}
}

func fillRect(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	draw.Draw(img, image.Rect(x0, y0, x1+1, y1+1), image.NewUniform(c), image.Point{}, draw.Src)
}

func strokeRect(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	line(img, x0, y0, x1, y0, 1, c)
	line(img, x0, y1, x1, y1, 1, c)
	line(img, x0, y0, x0, y1, 1, c)
	line(img, x1, y0, x1, y1, 1, c)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

type alignment int

const (
	alignLeft alignment = iota
	alignCenter
	alignRight
)

// textWidth is the width of s as drawText draws it.
func textWidth(s string) int {
	return font.MeasureString(basicfont.Face7x13, s).Ceil() * textScale
}

// drawText draws s with its top at y, anchored at x; vertical text reads bottom to
// top and is centred on (x, y). The bitmap font is drawn at textScale so that it
// reads at a glance.
func drawText(img *image.RGBA, s string, x, y int, c color.RGBA, align alignment, vertical bool) {
	face := basicfont.Face7x13
	w := font.MeasureString(face, s).Ceil()
	h := face.Height
	small := image.NewRGBA(image.Rect(0, 0, w, h))
	d := &font.Drawer{Dst: small, Src: image.NewUniform(c), Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	sw, sh := w*textScale, h*textScale
	if vertical {
		x0, y0 := x-sh/2, y-sw/2
		for sy := 0; sy < h; sy++ {
			for sx := 0; sx < w; sx++ {
				if small.RGBAAt(sx, sy).A == 0 {
					continue
				}
				// Rotate 90° counter-clockwise: (sx, sy) -> (sy, w-1-sx).
				fillRect(img, x0+sy*textScale, y0+(w-1-sx)*textScale, x0+sy*textScale+textScale-1, y0+(w-1-sx)*textScale+textScale-1, c)
			}
		}
		return
	}
	switch align {
	case alignCenter:
		x -= sw / 2
	case alignRight:
		x -= sw
	}
	for sy := 0; sy < h; sy++ {
		for sx := 0; sx < w; sx++ {
			if small.RGBAAt(sx, sy).A == 0 {
				continue
			}
			fillRect(img, x+sx*textScale, y+sy*textScale, x+sx*textScale+textScale-1, y+sy*textScale+textScale-1, c)
		}
	}
}
