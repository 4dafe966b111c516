// circuit-tracer's viewer calls c.drawAxis(svg) on what d3.conventions returns, as the d3-jetpack
// build it was written for provides; npm's d3-jetpack 2.2.0 has d3.drawAxis(c) only.
(function () {
  var conventions = d3.conventions
  d3.conventions = function (options) {
    var c = conventions(options)
    c.drawAxis = function (svg) {
      svg = svg || c.svg
      var xAxisSel = svg.append('g').attr('class', 'x axis')
        .attr('transform', 'translate(0,' + c.height + ')').call(c.xAxis)
      var yAxisSel = svg.append('g').attr('class', 'y axis').call(c.yAxis)
      return {xAxisSel: xAxisSel, yAxisSel: yAxisSel}
    }
    return c
  }
})()
